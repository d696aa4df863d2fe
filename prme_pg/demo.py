"""``prme-pg demo``: the main job, end to end, on a local memory pack.

It opens (or creates) the pack, saves a memory and a piece of evidence, confirms
the memory with that evidence, then sends the very same confirmation again -- as
an agent does when the first answer was lost on the way back -- and shows that it
counted once. Finally it checks the journal twice: with the engine's own check
and with Python's independent one. Everything it does is printed in plain words.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .client import MemoryClient
from .errors import IdempotencyConflict, PrmeError
from .models import Node

__all__ = ["DEMO_USER", "run_demo"]

DEMO_USER = "demo"
#: The demo's ids, derived from fixed names: every run makes the same calls, so a second run adds
#: nothing (the memory, its evidence and the confirmation are replays) and recall shows one memory.
DEMO_IDS = {
    name: uuid.uuid5(uuid.NAMESPACE_URL, f"urn:prme-pg:demo:{name}") for name in ("node", "event", "confirmation")
}


def _numbers(node: Node) -> str:
    return (
        f"version {node.version}, confidence {node.confidence_base.normalize():f}, "
        f"boost {node.reinforcement_boost.normalize():f}"
    )


def run_demo(path: str = "./memories", console: Console | None = None) -> int:
    """Run the demo on the pack at ``path``; 0 when everything behaved, 1 otherwise."""
    out = console or Console()
    try:
        memory = MemoryClient(path)
        memory.list_nodes(user_id=DEMO_USER)  # opens the pack file now: another process may hold it
    except (PrmeError, OSError) as exc:  # another process has it, not a folder, nowhere to create it
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        out.print(f"[red]Could not open the memory pack at {escape(path)}:[/] {escape(reason)}")
        return 1

    ok = True
    steps = Table(title="What happened", show_lines=False)
    for column in ("step", "version", "confidence", "boost", "replayed"):
        steps.add_column(column)

    def record(step: str, node: Node) -> None:
        steps.add_row(
            step,
            str(node.version),
            f"{node.confidence_base.normalize():f}",
            f"{node.reinforcement_boost.normalize():f}",
            "yes" if node.replayed else "no",
        )

    with memory:
        pack = getattr(memory.backend, "path", path)
        out.print(f"Opened the memory pack at [bold]{escape(str(pack))}[/] (a folder; created if it was missing).")

        try:
            node = memory.add_node(
                "The user prefers dark mode in every editor.",
                user_id=DEMO_USER,
                kind="preference",
                confidence_base=Decimal("0.6"),
                node_id=DEMO_IDS["node"],  # keyed: a second run finds this memory again, not a copy
            )
        except IdempotencyConflict:  # a run before this one saved it (and confirmed it since)
            node = memory.get_node(DEMO_IDS["node"], user_id=DEMO_USER)
        record("saved the memory", node)
        out.print(f"1. Saved a memory for user '{DEMO_USER}': \"{escape(node.content)}\" ({_numbers(node)}).")

        try:
            event = memory.add_event(
                "User: please switch everything to dark mode again.", user_id=DEMO_USER, event_id=DEMO_IDS["event"]
            )
        except IdempotencyConflict:  # recorded by a run before this one: the memory cites it
            event = next(e for e in memory.node_evidence(node.id, user_id=DEMO_USER) if e.id == DEMO_IDS["event"])
        out.print(f'2. Recorded what the user said as evidence: "{escape(event.content)}".')

        request_id = DEMO_IDS["confirmation"]
        first = memory.reinforce(node.id, event.id, user_id=DEMO_USER, request_id=request_id)
        record("confirmed it", first)
        out.print(f"3. Confirmed the memory with that evidence, as request {request_id}: now {_numbers(first)}.")

        out.print(
            "4. Suppose the answer to that request was lost on the way back. The agent cannot tell "
            "whether it counted, so it sends the same request again, with the same request id."
        )
        retry = memory.reinforce(node.id, event.id, user_id=DEMO_USER, request_id=request_id)
        record("sent it again", retry)
        counted_once = (
            retry.replayed
            and retry.version == first.version
            and retry.reinforcement_boost == first.reinforcement_boost
            and retry.confidence_base == first.confidence_base
            and retry.evidence_refs == first.evidence_refs
        )
        if counted_once:
            out.print(
                f"   The pack recognised the request id and answered from it (replayed = yes): still "
                f"{_numbers(retry)}. The confirmation counted [bold green]once[/]."
            )
        else:
            ok = False
            out.print(f"   [bold red]The retry was counted again[/]: {_numbers(retry)}.")

        records, _ = memory.journal_records(user_id=DEMO_USER)
        mine = sum(1 for journal_record in records if journal_record.node_id == node.id)
        engine_issues = memory.verify_journal(user_id=DEMO_USER)
        python_issues = memory.verify_journal(user_id=DEMO_USER, independent=True)
        replay = memory.replay_node(node.id, user_id=DEMO_USER)
        # Narrate this run's memory; a pack used before also holds earlier runs' memories.
        earlier = len(records) - mine
        out.print(
            f"5. Checked the journal. This memory has {mine} records, one per change, each with a sha256 "
            "checksum and a link to the one before it"
            + (f"; the pack holds {earlier} more from earlier runs, checked too:" if earlier else ":")
        )
        out.print(f"   - the engine's own check found {len(engine_issues)} problem(s);")
        out.print(
            f"   - Python's independent check (sha256, RFC 8785 form with the rfc8785 package, the chain) "
            f"found {len(python_issues)} problem(s);"
        )
        out.print(
            f"   - rebuilding this memory from its {replay.records} journal records "
            + (
                "gives exactly the stored memory."
                if replay.matches
                else f"does not match: {escape(replay.problem or '')}."
            )
        )
        for issue in [*engine_issues, *python_issues]:
            out.print(
                f"     [red]{escape(issue.problem)}[/] at {issue.node_id} version {issue.node_version}: "
                f"{escape(issue.detail)}"
            )
        ok = ok and not engine_issues and not python_issues and replay.matches

        hits = memory.recall("which editor mode?", user_id=DEMO_USER, max_count=3)
        found = next((hit for hit in hits if hit.id == node.id), None)
        out.print(
            '6. Recalled the user\'s memories for "which editor mode?" (words matched, then strength '
            "with virtual decay; docs/RECALL.md):"
        )
        for hit in hits:
            out.print(f'   {hit.rank}. score {hit.score:.3f}: "{escape(hit.content)}"')
        if found is None:
            ok = False
            out.print("   [bold red]The memory was not recalled.[/]")

    out.print(steps)
    if ok:
        out.print("[bold green]Done:[/] the retry counted once and the journal verifies.")
        return 0
    out.print("[bold red]Something did not behave as it should (see above).[/]")
    return 1
