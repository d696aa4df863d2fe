"""Server-Sent Events: the wire format, the resume point and the response.

A stream sends history first, then new events, until its max_seconds have passed (so
every client and test ends); a reconnect resumes from Last-Event-ID.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Header, Query
from fastapi.responses import StreamingResponse

from ..errors import InvalidInput

__all__ = [
    "EVENT_STREAM",
    "MAX_STREAM_SECONDS",
    "After",
    "LastEventId",
    "MaxSeconds",
    "event_stream",
    "message",
    "resume_after",
]

EVENT_STREAM = "text/event-stream"
MAX_STREAM_SECONDS = 300

After = Annotated[int, Query(ge=0, le=2**63 - 1, description="resume after this event id (Last-Event-ID wins)")]
MaxSeconds = Annotated[float, Query(ge=0, le=MAX_STREAM_SECONDS, description="end the stream after this many seconds")]
LastEventId = Annotated[
    str | None, Header(alias="Last-Event-ID", description="the last event id received; resume after it")
]


def message(seq: int, event: str, data: dict[str, Any]) -> str:
    """One Server-Sent Events message: id is where a reconnect resumes, data compact JSON."""
    return f"id: {seq}\nevent: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def resume_after(last_event_id: str | None, after: int) -> int:
    """Where a stream starts: Last-Event-ID (a reconnect) wins over ?after=."""
    if last_event_id is None or not last_event_id.strip():
        return after
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > 2**63 - 1:
        raise InvalidInput(f"Last-Event-ID must be an event id (a non-negative integer), got {last_event_id[:40]!r}")
    return int(text)


def event_stream(messages: AsyncIterator[str]) -> StreamingResponse:
    """The response that sends messages as they come (no caching, no proxy buffering)."""
    return StreamingResponse(
        messages,
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
