"""Bearer tokens for the HTTP API: ``prme.<owner>.<secret>``.

The owner part is the user_id in unpadded base64url, so the server finds the
token's row by ``(user_id, sha256(token))`` — a key that leads with user_id like
every other key in prme. Only the sha256 is stored; the token is shown once.
The separator is a dot, which neither base64url nor the secret ever contain.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass

__all__ = ["ParsedToken", "new_token", "parse_token", "token_sha256"]

PREFIX = "prme"


@dataclass(frozen=True, slots=True)
class ParsedToken:
    user_id: str
    sha256: str


def _b64(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode("utf-8")).rstrip(b"=").decode("ascii")


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token(user_id: str) -> str:
    """A fresh random token for user_id (256 bits of secret)."""
    return f"{PREFIX}.{_b64(user_id)}.{secrets.token_urlsafe(32)}"


def parse_token(token: str) -> ParsedToken | None:
    """The owner and hash of a well-formed token, or None for anything else."""
    parts = token.split(".", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or len(parts[2]) < 32:
        return None
    try:
        owner = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if _b64(owner) != parts[1]:  # reject non-canonical encodings of the same owner
        return None
    return ParsedToken(owner, token_sha256(token))
