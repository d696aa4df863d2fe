"""Prometheus metrics of the HTTP API: a middleware that counts and times every request,
and ``GET /metrics`` served by an app of its own on a separate bind.

``prme-pg serve --metrics-port N`` serves the metrics app on ``--metrics-host`` (default
127.0.0.1) port N beside the API; without it nothing is measured or served. ``/metrics``
needs no token, like ``/health``, which is why it is not on the API's port: the API's
port may face the internet, the metrics port faces the scraper. The metric definitions
are :class:`prme_pg.metrics.ServiceMetrics`; see docs/HTTP.md ("Metrics").
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import ServiceMetrics

__all__ = ["MetricsMiddleware", "metrics_app", "router", "serve"]

router = APIRouter()

#: The route label of a request no route matched: its path would be unbounded cardinality.
UNMATCHED = "unmatched"


class MetricsMiddleware:
    """Counts and times each HTTP request by method, route template and status (pure ASGI, so
    streaming answers are timed to their last byte)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client sees if the app fails before it answers

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        started = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED
            self.metrics.observe(scope["method"], str(template), status, time.perf_counter() - started)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    service: ServiceMetrics = request.app.state.metrics
    await service.refresh()
    body, content_type = service.render(request.headers.get("accept"))
    return Response(body, media_type=content_type)


def metrics_app(service: ServiceMetrics) -> FastAPI:
    """The app of the metrics bind: ``GET /metrics`` and nothing else (no docs, no OpenAPI)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.metrics = service
    app.include_router(router)
    return app


async def serve(
    api: ASGIApp,
    service: ServiceMetrics,
    *,
    host: str,
    port: int,
    uds: str | None = None,
    metrics_host: str,
    metrics_port: int,
    log_level: str,
    api_options: Mapping[str, Any] | None = None,
    sockets: list[socket.socket] | None = None,
    metrics_sockets: list[socket.socket] | None = None,
) -> None:
    """Serve the API and its metrics app side by side in this event loop, until SIGTERM or SIGINT.

    Each uvicorn server installs its signal handlers over the other's, so whichever stops
    first stops the other; the API's lifespan (which closes the client) ends last.
    ``sockets`` / ``metrics_sockets``: sockets already bound (prme_pg.http.listen), served as they are.
    """
    import uvicorn

    servers = [
        # api_options: the API server's protocol options (its head limit: prme_pg.http.uvicorn_options).
        uvicorn.Server(uvicorn.Config(api, host=host, port=port, uds=uds, log_level=log_level, **(api_options or {}))),
        uvicorn.Server(
            uvicorn.Config(
                metrics_app(service), host=metrics_host, port=metrics_port, log_level=log_level, lifespan="off"
            )
        ),
    ]

    async def run(server: uvicorn.Server, other: uvicorn.Server, bound: list[socket.socket] | None) -> None:
        try:
            await server.serve(sockets=bound)
        finally:
            other.should_exit = True

    await asyncio.gather(run(servers[0], servers[1], sockets), run(servers[1], servers[0], metrics_sockets))
