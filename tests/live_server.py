"""The HTTP API served for real: uvicorn on a free 127.0.0.1 port, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from prme_pg import AsyncMemoryClient, testing
from prme_pg.http import Limits, create_app, uvicorn_options


@contextmanager
def serve(dsn: str | Path, *, max_size: int = 4, limits: Limits | None = None) -> Iterator[str]:
    """Serve prme_pg.http over the database at dsn (or the memory pack at a Path), as
    prme-pg serve does (its limits and protocol options); yield the base URL; stop on exit."""
    port = testing.free_port()
    limits = limits or Limits()
    client = AsyncMemoryClient(dsn) if isinstance(dsn, Path) else AsyncMemoryClient(dsn, max_size=max_size)
    app = create_app(client, limits=limits)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **uvicorn_options(limits))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
