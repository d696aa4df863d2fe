"""Python's own journal verifier, independent of either engine.

The engines check their journals themselves (``prme.verify_journal``); this module
checks the same record texts with nothing but :mod:`hashlib`, :mod:`json` and the
``rfc8785`` package, so a bug in an engine's record builder cannot hide behind the
same engine's verifier. It accepts records from PostgreSQL and from a DuckDB pack
alike (they are byte-identical for the same inputs; docs/DESIGN.md section 4).

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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from decimal import Decimal
from itertools import groupby
from typing import Any

import rfc8785

from .models import JournalIssue, JournalRecord, NodeHead

__all__ = ["canonical_json", "checksum", "is_canonical", "parse_record", "verify_records"]


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
    ``heads`` (each node's version and the checksum it points at), a chain whose newest
    record is not the one its node points at is reported too: that catches a deleted
    newest record, which no later link would reveal.
    """
    ordered = sorted(records, key=lambda r: (r.node_id, r.node_version))
    issues: list[JournalIssue] = []
    newest: dict[Any, JournalRecord] = {}
    for node_id, group in groupby(ordered, key=lambda r: r.node_id):
        node_records = list(group)
        newest[node_id] = node_records[-1]
        issues.extend(_verify_chain(node_records))
    for head in sorted(heads or (), key=lambda h: h.node_id):
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
    return issues
