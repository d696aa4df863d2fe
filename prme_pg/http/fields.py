"""Field and header types more than one router uses."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

from fastapi import Header
from pydantic import PlainSerializer

__all__ = ["REPLAYED_HEADER", "IdempotencyKey", "Number"]

# Decimals go out as JSON numbers (0.65, not "0.65"); they are numeric(5,4), so a
# double holds each exactly enough to print the same shortest form.
Number = Annotated[Decimal, PlainSerializer(float, return_type=float, when_used="json")]

# A retried write with the same key counts once (it becomes the request_id).
IdempotencyKey = Annotated[UUID | None, Header(alias="Idempotency-Key", description="a UUID; becomes the request_id")]

# The response header of such a retry, for a route's documented responses.
REPLAYED_HEADER: dict[str, Any] = {"Idempotent-Replayed": {"schema": {"type": "string", "enum": ["true"]}}}
