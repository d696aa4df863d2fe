"""API tokens (sql/postgres/140_api_tokens.sql): the sha256 of bearer tokens, created, revoked
and checked."""

from __future__ import annotations

import re
from datetime import datetime
from typing import cast

import duckdb

from ...errors import IdempotencyConflict, InvalidInput
from ...validation import valid_user_id
from .. import (
    AuthenticateApiToken,
    CreateApiToken,
    RevokeApiToken,
)
from .connection import PackConnection
from .rows import _utc
from .validation import _SHA256_HEX, _no_nul

INSERT_BEARER_HASH = (
    "INSERT OR IGNORE INTO prme.api_tokens VALUES ($user_id, $token_sha256, $label, $created_at, NULL) "
    "RETURNING created_at"
)
REVOKE_BEARER_HASH = (
    "UPDATE prme.api_tokens SET revoked_at = $now "
    "WHERE user_id = $user_id AND token_sha256 = $token_sha256 AND revoked_at IS NULL"
)
LIVE_BEARER_HASH = (
    "SELECT 1 FROM prme.api_tokens WHERE user_id = $user_id AND token_sha256 = $token_sha256 AND revoked_at IS NULL"
)


_LABEL_CONTROL = re.compile(r"[\x01-\x1f\x7f-\x9f]")


def _valid_token_sha256(value: object) -> str:
    if not isinstance(value, str) or not _SHA256_HEX.fullmatch(value):
        raise InvalidInput("token_sha256 must be 64 lowercase hex digits")
    return value


def _valid_label(label: object) -> str:
    if not isinstance(label, str) or len(label) > 200 or _LABEL_CONTROL.search(label):
        raise InvalidInput("label must be at most 200 characters, no control characters")
    return _no_nul("label", label)


class TokenOperations(PackConnection):
    def create_api_token(self, request: CreateApiToken) -> datetime:
        params = {
            "user_id": valid_user_id(request.user_id),
            "token_sha256": _valid_token_sha256(request.token_sha256),
            "label": _valid_label(request.label),
        }

        def work(con: duckdb.DuckDBPyConnection) -> datetime:
            row = con.execute(INSERT_BEARER_HASH, {**params, "created_at": self._clock()}).fetchone()
            if row is None:
                raise IdempotencyConflict("this token is already registered")
            return cast(datetime, _utc(row[0]))

        return self.run(work)

    def revoke_api_token(self, request: RevokeApiToken) -> bool:
        params = {
            "user_id": valid_user_id(request.user_id),
            "token_sha256": _valid_token_sha256(request.token_sha256),
        }

        def work(con: duckdb.DuckDBPyConnection) -> bool:
            row = con.execute(REVOKE_BEARER_HASH, {**params, "now": self._clock()}).fetchone()
            return row is not None and row[0] > 0

        return self.run(work)

    def authenticate_api_token(self, request: AuthenticateApiToken) -> bool:
        # Malformed input is simply not a live token: authentication answers yes or no.
        params = {"user_id": str(request.user_id), "token_sha256": str(request.token_sha256)}
        return self.run(lambda con: con.execute(LIVE_BEARER_HASH, params).fetchone() is not None)
