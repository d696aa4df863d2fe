"""Issue 5, item 4: random call sequences on both backends agree with a plain model of docs/DESIGN.md section 3.

A Hypothesis RuleBasedStateMachine drives a PostgreSQL database (a fresh clone of the
template per example) and a DuckDB memory pack (a fresh folder per example) in lockstep
through prme_pg.MemoryClient, with the same node and event ids on both. Rules: add_node,
add_event, reinforce (no key, a new key, a reused key that is a replay, a conflicting
key, a foreign owner, evidence of another scope or owner, archived nodes), archive, and
reopen (close both clients and open them again). The model is a few dicts: the caps
with Decimal, versions, evidence_refs appended, keys per (user_id, namespace). After
every step every node read with get_node on each backend equals the model; every
outcome (the node returned, replayed, or the typed error) equals the model's. At the end
of each example both journals verify (engine and independent) and every node replays.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from prme_pg import MemoryClient, testing
from prme_pg.errors import IdempotencyConflict, NotFoundError

USERS = ["alice", "bob"]
NAMESPACES = ["default", "work"]
SCOPES = ["personal", "team"]
FRACTIONS = [Decimal(v) for v in ("0", "0.5", "0.85", "0.9", "0.93", "0.95", "0.97", "1")]
BOOST_STEP, BOOST_CAP = Decimal("0.15"), Decimal("0.5")
CONFIDENCE_STEP, CONFIDENCE_CAP = Decimal("0.05"), Decimal("0.95")

SETTINGS = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

STEPS: dict[str, int] = {}


@dataclass
class ModelNode:
    id: uuid.UUID
    user_id: str
    namespace: str
    scope: str
    content: str
    confidence_base: Decimal
    salience_base: Decimal
    reinforcement_boost: Decimal = Decimal(0)
    evidence_refs: list[uuid.UUID] = field(default_factory=list)
    lifecycle_state: str = "active"
    version: int = 1
    reinforced: bool = False

    def check(self, node: Any, backend: str) -> None:
        got = {
            "user_id": node.user_id,
            "namespace": node.namespace,
            "scope": node.scope,
            "content": node.content,
            "confidence_base": node.confidence_base,
            "salience_base": node.salience_base,
            "reinforcement_boost": node.reinforcement_boost,
            "evidence_refs": list(node.evidence_refs),
            "lifecycle_state": node.lifecycle_state,
            "version": node.version,
            "reinforced": node.last_reinforced_at is not None,
        }
        want = {name: getattr(self, name) for name in got}
        assert got == want, f"{backend} disagrees with the model on node {self.id}"


@dataclass(frozen=True)
class ModelEvent:
    id: uuid.UUID
    user_id: str
    namespace: str
    scope: str


@dataclass(frozen=True)
class UsedKey:
    user_id: str
    request_id: uuid.UUID
    node_id: uuid.UUID
    evidence_id: uuid.UUID | None


Opener = Callable[[], MemoryClient]


def make_machine(open_postgres: Opener, drop_postgres: Callable[[], None], tmp: Path) -> type[RuleBasedStateMachine]:
    class PrmeMachine(RuleBasedStateMachine):
        nodes = Bundle("nodes")
        events = Bundle("events")
        keys = Bundle("keys")

        def __init__(self) -> None:
            super().__init__()
            self.pack = tmp / uuid.uuid4().hex
            self.clients: dict[str, MemoryClient] = {}
            self.clients["postgres"] = open_postgres()
            self.clients["duckdb"] = MemoryClient(self.pack)
            self.model_nodes: dict[uuid.UUID, ModelNode] = {}
            self.model_events: dict[uuid.UUID, ModelEvent] = {}
            self.model_keys: dict[tuple[str, str, uuid.UUID], tuple[uuid.UUID, uuid.UUID | None]] = {}
            self.calls = 0

        def _both(self, call: Callable[[MemoryClient], Any]) -> dict[str, tuple[str, Any]]:
            """Run call on each backend: {backend: ("ok", result) or ("error", exception class)}."""
            outcomes: dict[str, tuple[str, Any]] = {}
            for name, client in self.clients.items():
                try:
                    outcomes[name] = ("ok", call(client))
                except (NotFoundError, IdempotencyConflict) as exc:
                    outcomes[name] = ("error", type(exc))
            return outcomes

        def _count(self, what: str) -> None:
            self.calls += 1
            STEPS[what] = STEPS.get(what, 0) + 1

        @rule(
            target=nodes,
            user=st.sampled_from(USERS),
            namespace=st.sampled_from(NAMESPACES),
            scope=st.sampled_from(SCOPES),
            confidence=st.sampled_from(FRACTIONS),
            salience=st.sampled_from(FRACTIONS),
        )
        def add_node(self, user: str, namespace: str, scope: str, confidence: Decimal, salience: Decimal) -> uuid.UUID:
            node_id = uuid.uuid4()
            model = ModelNode(node_id, user, namespace, scope, f"memory {node_id}", confidence, salience)
            outcomes = self._both(
                lambda c: c.add_node(
                    model.content,
                    user_id=user,
                    namespace=namespace,
                    scope=scope,
                    confidence_base=confidence,
                    salience_base=salience,
                    node_id=node_id,
                )
            )
            for name, (kind, node) in outcomes.items():
                assert kind == "ok", (name, node)
                model.check(node, name)
            self.model_nodes[node_id] = model
            self._count("add_node")
            return node_id

        @rule(
            target=events,
            user=st.sampled_from(USERS),
            namespace=st.sampled_from(NAMESPACES),
            scope=st.sampled_from(SCOPES),
        )
        def add_event(self, user: str, namespace: str, scope: str) -> uuid.UUID:
            event_id = uuid.uuid4()
            outcomes = self._both(
                lambda c: c.add_event("evidence", user_id=user, namespace=namespace, scope=scope, event_id=event_id)
            )
            for name, (kind, event) in outcomes.items():
                assert kind == "ok" and event.id == event_id, (name, event)
            self.model_events[event_id] = ModelEvent(event_id, user, namespace, scope)
            self._count("add_event")
            return event_id

        def _model_reinforce(
            self, node_id: uuid.UUID, evidence_id: uuid.UUID | None, user: str, request_id: uuid.UUID | None
        ) -> tuple[str, Any]:
            """docs/DESIGN.md section 3 on the model: ("ok", (node, replayed)) or ("error", class)."""
            node = self.model_nodes.get(node_id)
            if node is None or node.user_id != user:
                return "error", NotFoundError
            key = (user, node.namespace, request_id) if request_id is not None else None
            if key is not None and key in self.model_keys:
                if self.model_keys[key] == (node_id, evidence_id):
                    return "ok", (node, True)
                return "error", IdempotencyConflict
            if node.lifecycle_state == "archived":
                return "error", NotFoundError
            if evidence_id is not None:
                event = self.model_events.get(evidence_id)
                if event is None or event.user_id != user or event.scope != node.scope:
                    return "error", NotFoundError
            b, c = node.reinforcement_boost, node.confidence_base
            node.reinforcement_boost = max(b, min(b + BOOST_STEP, BOOST_CAP))
            node.confidence_base = max(c, min(c + CONFIDENCE_STEP, CONFIDENCE_CAP))
            if evidence_id is not None:
                node.evidence_refs.append(evidence_id)
            node.version += 1
            node.reinforced = True
            if key is not None:
                self.model_keys[key] = (node_id, evidence_id)
            return "ok", (node, False)

        def _reinforce(
            self, node_id: uuid.UUID, evidence_id: uuid.UUID | None, user: str, request_id: uuid.UUID | None
        ) -> tuple[str, Any]:
            want = self._model_reinforce(node_id, evidence_id, user, request_id)
            outcomes = self._both(lambda c: c.reinforce(node_id, evidence_id, user_id=user, request_id=request_id))
            for name, (kind, got) in outcomes.items():
                assert kind == want[0], f"{name}: {got} where the model says {want[1]}"
                if kind == "error":
                    assert got is want[1], f"{name}: {got.__name__} where the model says {want[1].__name__}"
                else:
                    node, replayed = want[1]
                    assert got.replayed == replayed, name
                    node.check(got, name)
            self._count(
                "reinforce " + (want[1].__name__ if want[0] == "error" else "replayed" if want[1][1] else "applied")
            )
            return want

        @rule(
            target=keys,
            node_id=nodes,
            evidence_id=st.none() | events,
            owner=st.sampled_from([True, True, True, False]),  # mostly the owner
            keyed=st.booleans(),
        )
        def reinforce(self, node_id: uuid.UUID, evidence_id: uuid.UUID | None, owner: bool, keyed: bool) -> Any:
            """A new key (or none), by the owner or by another owner."""
            node = self.model_nodes[node_id]
            user = node.user_id if owner else next(u for u in USERS if u != node.user_id)
            request_id = uuid.uuid4() if keyed else None
            kind, _ = self._reinforce(node_id, evidence_id, user, request_id)
            if kind == "ok" and request_id is not None:
                return UsedKey(user, request_id, node_id, evidence_id)
            return multiple()

        @rule(target=keys, node_id=nodes)
        def reinforce_by_owner(self, node_id: uuid.UUID) -> Any:
            """The common case, drawn on its own so that confirmations pile up past the caps."""
            user, request_id = self.model_nodes[node_id].user_id, uuid.uuid4()
            kind, _ = self._reinforce(node_id, None, user, request_id)
            return UsedKey(user, request_id, node_id, None) if kind == "ok" else multiple()

        @rule(key=keys)
        def retry_same_key(self, key: UsedKey) -> None:
            """The same call again: a replay (even after archive), whatever happened since."""
            kind, result = self._reinforce(key.node_id, key.evidence_id, key.user_id, key.request_id)
            assert kind == "ok" and result[1], "a retry with the same key is a replay"

        @rule(key=keys, evidence_id=st.none() | events)
        def conflicting_key(self, key: UsedKey, evidence_id: uuid.UUID | None) -> None:
            """A used key for the same node with other evidence: always a conflict (the key
            is checked before the node's state and the evidence)."""
            if evidence_id == key.evidence_id:
                evidence_id = uuid.uuid4()  # names no event: still a conflict, not "not found"
            kind, result = self._reinforce(key.node_id, evidence_id, key.user_id, key.request_id)
            assert kind == "error" and result is IdempotencyConflict

        @rule(key=keys, node_id=nodes, evidence_id=st.none() | events, foreign=st.booleans())
        def reuse_key(self, key: UsedKey, node_id: uuid.UUID, evidence_id: uuid.UUID | None, foreign: bool) -> None:
            """A used key for another call: a conflict in the same (owner, namespace),
            an independent key elsewhere, not found for a node of another owner."""
            user = key.user_id if not foreign else next(u for u in USERS if u != key.user_id)
            self._reinforce(node_id, evidence_id, user, key.request_id)

        @rule(node_id=nodes, owner=st.booleans())
        def archive(self, node_id: uuid.UUID, owner: bool) -> None:
            node = self.model_nodes[node_id]
            user = node.user_id if owner else next(u for u in USERS if u != node.user_id)
            if not owner or node.lifecycle_state == "archived":
                want: tuple[str, Any] = ("error", NotFoundError)
            else:
                node.lifecycle_state = "archived"
                node.version += 1
                want = ("ok", node)
            for name, (kind, got) in self._both(lambda c: c.archive_node(node_id, user_id=user)).items():
                assert kind == want[0], (name, got)
                if kind == "ok":
                    node.check(got, name)
                else:
                    assert got is want[1], name
            self._count("archive " + ("applied" if want[0] == "ok" else "NotFoundError"))

        @precondition(lambda self: self.calls % 6 == 5)  # about one step in six: a rule without
        @rule()  # arguments would otherwise be drawn far more often than the others
        def reopen(self) -> None:
            for client in self.clients.values():
                client.close()
            self.clients = {"postgres": open_postgres(), "duckdb": MemoryClient(self.pack)}
            self._count("reopen")

        @invariant()
        def backends_equal_the_model(self) -> None:
            for model in self.model_nodes.values():
                for name, client in self.clients.items():
                    model.check(client.get_node(model.id, user_id=model.user_id), name)

        def teardown(self) -> None:
            try:
                for name, client in self.clients.items():
                    for user in USERS:
                        assert client.verify_journal(user_id=user) == [], name
                        assert client.verify_journal(user_id=user, independent=True) == [], name
                    for model in self.model_nodes.values():
                        replay = client.replay_node(model.id, user_id=model.user_id)
                        assert replay.matches, (name, model.id, replay.problem)
                        other = next(u for u in USERS if u != model.user_id)
                        try:
                            client.get_node(model.id, user_id=other)
                        except NotFoundError:
                            continue
                        raise AssertionError(f"{name}: {other} can read a node of {model.user_id}")
                STEPS["records verified"] = STEPS.get("records verified", 0) + sum(
                    len(client.journal_records(user_id=user)[0]) for client in self.clients.values() for user in USERS
                )
                STEPS["examples"] = STEPS.get("examples", 0) + 1
            finally:
                for client in self.clients.values():
                    client.close()
                drop_postgres()

    return PrmeMachine


def test_both_backends_agree_with_the_model(
    pg_server: testing.Server, template_db: str, tmp_path: Path, figures: Any
) -> None:
    databases: list[str] = []

    def open_postgres() -> MemoryClient:
        if not databases:
            databases.append(testing.create_database(pg_server, template=template_db, prefix="prme_model"))
        return MemoryClient(pg_server.dsn_for(databases[0]), min_size=1, max_size=2)

    def drop_postgres() -> None:
        while databases:
            testing.drop_database(pg_server, databases.pop())

    STEPS.clear()
    machine = make_machine(open_postgres, drop_postgres, tmp_path)
    run_state_machine_as_test(machine, settings=SETTINGS)
    assert STEPS.get("examples", 0) >= 1
    figures(
        "4 stateful model (both backends in lockstep)",
        **{name.replace(" ", "_"): count for name, count in sorted(STEPS.items())},
    )
