"""Python's own journal verifier, independent of either engine.

The engines check their journals themselves (``prme.verify_journal``); this module
checks the same record texts with nothing but :mod:`hashlib`, :mod:`json` and the
``rfc8785`` package, so a bug in an engine's record builder cannot hide behind the
same engine's verifier. It accepts records from PostgreSQL and from a DuckDB pack
alike (they are byte-identical for the same inputs; DESIGN.md section 4).

Problems reported (one :class:`~prme_pg.models.JournalIssue` each), named as
``prme.verify_journal`` names them, plus ``non_canonical``:

``checksum_mismatch``  sha256 of the record's UTF-8 bytes differs from the checksum
``malformed_record``   the text is not a JSON object
``non_canonical``      the text is JSON but not its own RFC 8785 form
``column_mismatch``    a stored column disagrees with the field of the record it copies
``continuity_break``   ``before`` differs from the previous record's ``after``
``version_gap``        node versions do not run 1, 2, 3, ...
``chain_break``        a version 2 record's ``prev_checksum`` is not the previous checksum
``head_mismatch``      the node does not point at its newest record (heads given only)
``node_missing``       records whose node row is gone (heads given only)

What the database can check ends where a node row and its whole chain are deleted
together, or a chain and its node row are rewritten consistently: nothing inside is left
to disagree. :class:`JournalHead` anchors a journal outside: its record count and every
chain's newest checksum (which pins the whole chain, each record naming the previous
one's checksum), sealed by a digest. :func:`verify_against` later checks that the journal
still holds every anchored record unchanged (``anchor_missing``, ``anchor_mismatch``).
See docs/JOURNAL.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from itertools import groupby, pairwise
from typing import Any, TypeGuard
from uuid import UUID

import rfc8785

from .models import JournalIssue, JournalRecord, NodeHead

__all__ = [
    "HEAD_FORMAT",
    "JournalHead",
    "canonical_json",
    "checksum",
    "is_canonical",
    "journal_head",
    "parse_record",
    "verify_against",
    "verify_records",
]


def checksum(record: str) -> str:
    """sha256 hex of the record's UTF-8 bytes: the journal's checksum."""
    return hashlib.sha256(record.encode("utf-8")).hexdigest()


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are accepted by json.loads but are not JSON.
    raise ValueError(f"{name} is not valid JSON")


def parse_record(record: str) -> Any:
    """The record as Python values, numbers as exact Decimals (ints stay ints)."""
    return json.loads(record, parse_float=Decimal, parse_constant=_reject_constant)


def canonical_json(value: Any) -> str:
    """RFC 8785 text of a JSON value (floats, not Decimals: rfc8785 formats ECMAScript numbers)."""
    return rfc8785.dumps(value).decode("utf-8")


def is_canonical(record: str) -> bool:
    """Whether the text is exactly the RFC 8785 form of the JSON it holds.

    Parsed with floats on purpose: every number the journal holds (numeric(5,4) values
    and integers) survives the float round trip, and rfc8785 prints floats in the
    shortest ECMAScript form (0.65 stays 0.65, 1.0 becomes 1), which is the canonical form.
    """
    try:
        value = json.loads(record, parse_constant=_reject_constant)
        return canonical_json(value) == record
    except (ValueError, rfc8785.CanonicalizationError):
        return False


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _columns_agree(entry: JournalRecord, doc: dict[str, Any]) -> bool:
    after = doc.get("after")
    after_version = after.get("version") if isinstance(after, dict) else None
    agree = (
        doc.get("node_id") == str(entry.node_id)
        and doc.get("user_id") == entry.user_id
        and doc.get("op") == entry.op
        and doc.get("version") == entry.record_version
        and doc.get("operation_id") == str(entry.operation_id)
        and doc.get("evidence_id") == _text(entry.evidence_id)
        and after_version == entry.node_version
    )
    if entry.record_version == 2:
        agree = agree and (
            doc.get("request_id") == _text(entry.request_id) and doc.get("prev_checksum") == entry.prev_checksum
        )
    return agree


def _verify_chain(node_records: list[JournalRecord]) -> list[JournalIssue]:
    issues: list[JournalIssue] = []
    expected_version = 1
    prev_checksum: str | None = None
    prev_after: Any = None

    def issue(entry: JournalRecord, problem: str, detail: str) -> None:
        issues.append(JournalIssue(entry.node_id, entry.node_version, problem, detail))

    for entry in node_records:
        if checksum(entry.record) != entry.checksum:
            issue(entry, "checksum_mismatch", "sha256 of the stored record text differs from the stored checksum")
        try:
            doc = parse_record(entry.record)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            issue(entry, "malformed_record", "the stored record text is not a JSON object")
        else:
            if not is_canonical(entry.record):
                issue(entry, "non_canonical", "the stored record text is not in RFC 8785 canonical form")
            if not _columns_agree(entry, doc):
                issue(entry, "column_mismatch", "a column of the journal row disagrees with its record")
            # A missing key compares as JSON null, as in prme.verify_journal.
            if "before" not in doc or doc["before"] != prev_after:
                issue(entry, "continuity_break", "before differs from the after of the previous record of this node")
            prev_after = doc.get("after")
        if entry.node_version != expected_version:
            issue(entry, "version_gap", f"expected node version {expected_version}")
        if entry.record_version == 2 and entry.prev_checksum != prev_checksum:
            issue(
                entry,
                "chain_break",
                f"prev_checksum {entry.prev_checksum or 'null'} does not name the previous record "
                f"{prev_checksum or 'null'}",
            )
        expected_version = entry.node_version + 1
        prev_checksum = entry.checksum
    return issues


def verify_records(records: Iterable[JournalRecord], heads: Iterable[NodeHead] | None = None) -> list[JournalIssue]:
    """Check journal records of one owner; an empty list means they verify.

    Records may come in any order: they are checked per node in version order. With
    ``heads`` (each node's version and the checksum it points at, one per node row), a
    chain whose newest record is not the one its node points at is reported too: that
    catches a deleted newest record, which no later link would reveal; and so is a chain
    with no node row (a deleted node).
    """
    ordered = sorted(records, key=lambda r: (r.node_id, r.node_version))
    issues: list[JournalIssue] = []
    newest: dict[Any, JournalRecord] = {}
    counts: dict[Any, int] = {}
    for node_id, group in groupby(ordered, key=lambda r: r.node_id):
        node_records = list(group)
        newest[node_id], counts[node_id] = node_records[-1], len(node_records)
        issues.extend(_verify_chain(node_records))
    if heads is None:
        return issues
    nodes = sorted(heads, key=lambda h: h.node_id)
    for head in nodes:
        last = newest.get(head.node_id)
        if last is None or last.checksum != head.last_checksum or last.node_version != head.version:
            issues.append(
                JournalIssue(
                    head.node_id,
                    head.version,
                    "head_mismatch",
                    f"node points at {head.last_checksum}, newest record is {last.checksum if last else 'missing'}",
                )
            )
    present = {head.node_id for head in nodes}
    for node_id, last in newest.items():  # in node order, as the records were grouped
        if node_id not in present:
            detail = f"no node row for its {counts[node_id]} journal record(s)"
            issues.append(JournalIssue(node_id, last.node_version, "node_missing", detail))
    return issues


# -- anchoring a journal outside the database ------------------------------------------

#: The ``format`` of a head document (and of the text its digest is taken over).
HEAD_FORMAT = "prme-journal-head/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class JournalHead:
    """What one owner's journal held when it was anchored.

    ``chains`` has one :class:`~prme_pg.models.NodeHead` per chain (node id, newest
    version and its checksum), in node id order. ``digest`` is the sha256 of the RFC 8785
    text of ``{"chains", "format", "records", "user_id"}``: short enough to keep somewhere
    else as well (a ticket, a log line), and equal for two heads of an unchanged journal.
    ``taken_at`` is informative and outside the digest.
    """

    user_id: str
    records: int
    chains: tuple[NodeHead, ...]
    taken_at: datetime

    def _sealed(self) -> dict[str, Any]:
        return {
            "format": HEAD_FORMAT,
            "user_id": self.user_id,
            "records": self.records,
            "chains": [[str(c.node_id), c.version, c.last_checksum] for c in self.chains],
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(rfc8785.dumps(self._sealed())).hexdigest()

    def to_document(self) -> dict[str, Any]:
        """The head as a JSON-ready document (what ``prme-pg journal head`` writes)."""
        when = self.taken_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {**self._sealed(), "digest": self.digest, "taken_at": when}

    @classmethod
    def from_document(cls, document: object) -> JournalHead:
        """A head read back from :meth:`to_document`'s form; ValueError, saying what is wrong,
        for anything else, including a document whose digest does not match its contents."""
        if not isinstance(document, Mapping) or document.get("format") != HEAD_FORMAT:
            raise ValueError(f"not a journal head (a JSON object with format {HEAD_FORMAT!r})")
        user_id, records, chains = document.get("user_id"), document.get("records"), document.get("chains")
        if not isinstance(user_id, str) or not _is_count(records) or not isinstance(chains, list):
            raise ValueError("a journal head needs user_id (text), records (a count) and chains (a list)")
        heads = tuple(_chain_head(entry) for entry in chains)
        if any(a.node_id >= b.node_id for a, b in pairwise(heads)):
            raise ValueError("a journal head lists each chain once, in node id order")
        try:
            taken_at = datetime.fromisoformat(str(document.get("taken_at")))
        except ValueError:
            raise ValueError("a journal head's taken_at must be an ISO 8601 time") from None
        head = cls(user_id, records, heads, taken_at)
        if document.get("digest") != head.digest:
            raise ValueError("the journal head does not match its digest: it was edited or damaged")
        return head


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _chain_head(entry: object) -> NodeHead:
    if isinstance(entry, list) and len(entry) == 3:
        node_id, version, digest = entry
        if isinstance(node_id, str) and _is_count(version) and isinstance(digest, str) and _HEX64.fullmatch(digest):
            try:
                return NodeHead(UUID(node_id), version, digest)
            except ValueError:
                pass
    raise ValueError(f"a journal head's chain must be [node_id, version, sha256], got {json.dumps(entry)[:200]}")


def journal_head(user_id: str, records: Iterable[JournalRecord], taken_at: datetime | None = None) -> JournalHead:
    """The head of one owner's journal: the number of records and each chain's newest one.

    Take it from records that verify (:func:`verify_records` returned nothing): a head
    anchors what was there, it does not vouch for it.
    """
    newest: dict[UUID, JournalRecord] = {}
    count = 0
    for record in records:
        count += 1
        current = newest.get(record.node_id)
        if current is None or record.node_version > current.node_version:
            newest[record.node_id] = record
    chains = tuple(NodeHead(r.node_id, r.node_version, r.checksum) for _, r in sorted(newest.items()))
    return JournalHead(user_id, count, chains, taken_at or datetime.now(UTC))


def verify_against(head: JournalHead, records: Iterable[JournalRecord]) -> list[JournalIssue]:
    """Check that the journal still holds every record ``head`` anchored, unchanged.

    Each chain's newest record at the time of the head must still be there with the same
    checksum; with :func:`verify_records` clean (each record naming its predecessor's
    checksum), that holds the whole chain up to it. New records and new chains since
    are fine: a journal only grows.
    """
    stored = {(r.node_id, r.node_version): r.checksum for r in records}
    issues: list[JournalIssue] = []
    for chain in head.chains:
        found = stored.get((chain.node_id, chain.version))
        if found is None:
            issues.append(
                JournalIssue(
                    chain.node_id,
                    chain.version,
                    "anchor_missing",
                    f"the record anchored at version {chain.version} ({chain.last_checksum}) is gone",
                )
            )
        elif found != chain.last_checksum:
            issues.append(
                JournalIssue(
                    chain.node_id,
                    chain.version,
                    "anchor_mismatch",
                    f"checksum {found} differs from the anchored {chain.last_checksum}",
                )
            )
    return issues
