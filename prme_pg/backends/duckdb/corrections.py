"""Corrections (sql/postgres/220_correction_linking.sql): is_correction, link_correction and the
correction inbox, the same rules in Python."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any, cast

import duckdb

from ...errors import IdempotencyConflict, InvalidInput, NotFoundError
from ...models import (
    CorrectionInboxEntry,
    CorrectionLink,
    CorrectionMatch,
)
from ...validation import valid_user_id
from .. import (
    LinkCorrection,
    ListCorrectionInbox,
    ResolveCorrection,
)
from .connection import PackConnection
from .outcomes import _add_outcome, _valid_ref
from .rows import _fetch_dicts, _utc
from .validation import _MAX_TEXT_BYTES, _valid_max_count, valid_content
from .writes import _node_row

# DuckDB's regular expressions (RE2) have no lookahead and no \m / \M, so the pack runs
# prme.is_correction's expressions with Python's re, translated one for one: \m is
# (?<!\w)(?=\w), \M is (?<=\w)(?!\w), [[:alnum:]] is [^\W_]. tests/test_conformance_corrections.py
# holds both engines to the same answer for every phrase of docs/MAINTENANCE.md's table.

_WORD_START = r"(?<!\w)(?=\w)"
_WORD_END = r"(?<=\w)(?!\w)"
_ALNUM = r"[^\W_]"
# The start of the message, or of a line, sentence or clause within it.
_START = r"(^|\n|[.!?;:,] ?)\s*"
# The rest of a sentence: no line break, and no . ! ? ; ending one (os.path does not end it).
_SAME_SENTENCE = r"(?:[^\n.!?;]|\.\S)*"
_CORRECTION_RULES = tuple(
    re.compile(rule)
    for rule in (
        _START + rf"(please )?(don'?t|do not|never|always|stop|quit){_WORD_END}(?! ?mind{_WORD_END})"
        rf"(?! worry{_WORD_END})",
        _START + rf"(no|nope|nah)([,.!:;]+| -|\n)\s*{_ALNUM}",
        _START + rf"(well,? )?actually{_WORD_END}",
        rf"{_WORD_START}prefers? (?!to{_WORD_END})\S{_SAME_SENTENCE}{_WORD_START}(over|instead of|rather than|to)"
        rf"{_WORD_END}",
        rf"{_WORD_START}favou?rs? \S{_SAME_SENTENCE}{_WORD_START}over{_WORD_END}",
        rf"{_WORD_START}use \S{_SAME_SENTENCE}{_WORD_START}instead{_WORD_END}",
        _START + rf"(going forward(,| -|:)|from now on(,| -|:)?) ?{_ALNUM}",
        rf"{_WORD_START}(you|i|we)( should| must| will)? (never|always){_WORD_END}",
        rf"{_WORD_START}(that|this|it)('s| is| was) (wrong|incorrect|not (right|true|correct)){_WORD_END}",
        _START + rf"i (already )?(said|told you){_WORD_END}",
    )
)
_LINE_BREAKS = re.compile("[\n\r\u2028\u2029]+")
_BLANKS = re.compile(r"\s+")
_APOSTROPHES = str.maketrans("\u2019\u2018`", "'''")


def is_correction_text(message: str | None) -> bool:
    """prme.is_correction: does the message use explicit correction phrasing?"""
    if message is not None:
        size = len(message.encode("utf-8", "surrogatepass"))
        if size > _MAX_TEXT_BYTES:
            raise InvalidInput(f"message must be at most 65536 bytes (got {size} bytes)")
    lines = _LINE_BREAKS.split((message or "").translate(_APOSTROPHES).lower())
    text = "\n".join(_BLANKS.sub(" ", line).strip(" ") for line in lines)
    return any(rule.search(text) for rule in _CORRECTION_RULES)


_TOKEN_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def correction_tokens(text: str) -> frozenset[str]:
    """prme._correction_tokens: distinct lower-cased runs of [A-Za-z0-9] longer than 3 characters."""
    return frozenset(token.lower() for token in _TOKEN_SPLIT.split(text) if len(token) > 3)


ACTIVE_CANDIDATES = (
    "SELECT id, content, version FROM prme.nodes "
    "WHERE user_id = $user_id AND list_contains(CAST($ids AS UUID []), id) AND lifecycle_state = 'active'"
)
INSERT_INBOX = (
    "INSERT INTO prme.correction_inbox VALUES ($user_id, $id, $message, $thread_id, CAST($candidates AS UUID []), "
    "CAST($matched AS UUID []), $reason, $created_at, NULL, NULL, NULL, NULL)"
)
_INBOX_COLUMNS = (
    "id, user_id, message, thread_id, candidate_node_ids, matched_node_ids, reason, created_at, resolution, "
    "resolved_node_id, outcome_id, resolved_at"
)
LIST_INBOX = (
    f"SELECT {_INBOX_COLUMNS} FROM prme.correction_inbox "
    "WHERE user_id = $user_id AND (resolution IS NULL OR $all) ORDER BY created_at, id LIMIT $max_count"
)
GET_INBOX = f"SELECT {_INBOX_COLUMNS} FROM prme.correction_inbox WHERE user_id = $user_id AND id = $id"
RESOLVE_INBOX = (
    "UPDATE prme.correction_inbox SET resolution = $resolution, resolved_node_id = $resolved_node_id, "
    "outcome_id = $outcome_id, resolved_at = $resolved_at WHERE user_id = $user_id AND id = $id"
)


def _match(scored: tuple[Fraction, uuid.UUID, int]) -> CorrectionMatch:
    # round(shared::numeric / smaller, 4): half away from zero.
    overlap, node_id, _ = scored
    exact = Decimal(overlap.numerator) / Decimal(overlap.denominator)
    return CorrectionMatch(node_id, exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


def _inbox_entry(row: Mapping[str, Any]) -> CorrectionInboxEntry:
    return CorrectionInboxEntry(
        id=row["id"],
        user_id=row["user_id"],
        message=row["message"],
        thread_id=row["thread_id"],
        candidate_node_ids=tuple(row["candidate_node_ids"]),
        matched_node_ids=tuple(row["matched_node_ids"]),
        reason=row["reason"],
        created_at=cast(datetime, _utc(row["created_at"])),
        resolution=row["resolution"],
        resolved_node_id=row["resolved_node_id"],
        outcome_id=row["outcome_id"],
        resolved_at=_utc(row["resolved_at"]),
    )


class CorrectionOperations(PackConnection):
    def link_correction(self, request: LinkCorrection) -> CorrectionLink:
        user_id = valid_user_id(request.user_id)
        message = valid_content(request.message)
        thread_id = _valid_ref("thread_id", request.thread_id)
        if len(request.candidate_node_ids) > 1000 or any(c is None for c in request.candidate_node_ids):
            raise InvalidInput("candidate_node_ids must be an array of at most 1000 non-null ids")
        # A candidate listed twice counts once: the distinct ids, in the order first listed.
        candidates = list(dict.fromkeys(request.candidate_node_ids))

        def work(con: duckdb.DuckDBPyConnection) -> CorrectionLink:
            rows = con.execute(ACTIVE_CANDIDATES, {"user_id": user_id, "ids": candidates}).fetchall()
            size = sum(len(content.encode("utf-8")) for _, content, _ in rows)
            if size > 1048576:
                raise InvalidInput(
                    f"the candidates' content must be at most 1 MiB in all: pass fewer candidates (got {size} bytes)"
                )
            tokens = correction_tokens(message)
            scored: list[tuple[Fraction, uuid.UUID, int]] = []
            for node_id, content, version in rows:
                theirs = correction_tokens(content)
                smaller = min(len(theirs), len(tokens))
                shared = len(theirs & tokens)
                if smaller > 0 and 100 * shared >= 45 * smaller:
                    scored.append((Fraction(shared, smaller), node_id, version))
            scored.sort(key=lambda s: (-s[0], s[1]))
            now = self._clock()
            if len(scored) == 1:
                _, node_id, version = scored[0]
                row = _add_outcome(
                    con,
                    self._new_id,
                    user_id=user_id,
                    node_id=node_id,
                    outcome="explicit_correction",
                    evidence_id=None,
                    profile_id=None,
                    thread_id=thread_id,
                    notes=message,
                    request_id=None,
                    recorded_by="link_correction",
                    node_version=version,
                    created_at=now,
                )
                return CorrectionLink("linked", node_id, row["id"], None, (_match(scored[0]),))
            matched = [node_id for _, node_id, _ in scored]
            inbox_id = self._new_id()
            con.execute(
                INSERT_INBOX,
                {
                    "user_id": user_id,
                    "id": inbox_id,
                    "message": message,
                    "thread_id": thread_id,
                    "candidates": candidates,
                    "matched": matched,
                    "reason": "ambiguous" if len(matched) >= 2 else "no_match",
                    "created_at": now,
                },
            )
            status = "ambiguous" if len(matched) >= 2 else "unmatched"
            return CorrectionLink(status, None, None, inbox_id, tuple(_match(s) for s in scored))

        return self.run(work)

    def list_correction_inbox(self, request: ListCorrectionInbox) -> list[CorrectionInboxEntry]:
        user_id = valid_user_id(request.user_id)
        max_count = _valid_max_count(request.max_count)
        params = {"user_id": user_id, "all": bool(request.include_resolved), "max_count": max_count}
        return self.run(lambda con: [_inbox_entry(row) for row in _fetch_dicts(con.execute(LIST_INBOX, params))])

    def resolve_correction(self, request: ResolveCorrection) -> CorrectionInboxEntry:
        user_id = valid_user_id(request.user_id)
        if request.inbox_id is None:
            raise InvalidInput("inbox_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> CorrectionInboxEntry:
            found = _fetch_dicts(con.execute(GET_INBOX, {"user_id": user_id, "id": request.inbox_id}))
            if not found:
                raise NotFoundError("inbox entry not found")
            entry = found[0]
            # Resolving again the same way returns the entry; any other way is a conflict.
            if entry["resolution"] is not None:
                if entry["resolved_node_id"] == request.node_id:
                    return _inbox_entry(entry)
                raise IdempotencyConflict(
                    f"inbox entry was already resolved otherwise (resolution {entry['resolution']})"
                )
            now = self._clock()
            if request.node_id is not None:
                node = _node_row(con, user_id, request.node_id)
                if node is None or node["lifecycle_state"] == "archived":
                    raise NotFoundError("node not found")
                row = _add_outcome(
                    con,
                    self._new_id,
                    user_id=user_id,
                    node_id=request.node_id,
                    outcome="explicit_correction",
                    evidence_id=None,
                    profile_id=None,
                    thread_id=entry["thread_id"],
                    notes=entry["message"],
                    request_id=None,
                    recorded_by="resolve_correction",
                    node_version=node["version"],
                    created_at=now,
                )
                entry.update(resolution="linked", resolved_node_id=request.node_id, outcome_id=row["id"])
            else:
                entry["resolution"] = "dismissed"
            entry["resolved_at"] = now
            con.execute(
                RESOLVE_INBOX,
                {k: entry[k] for k in ("user_id", "id", "resolution", "resolved_node_id", "outcome_id", "resolved_at")},
            )
            return _inbox_entry(entry)

        return self.run(work)
