"""The HTTP API: FastAPI over :class:`~prme_pg.AsyncMemoryClient`.

Every route but those in :data:`PUBLIC_PATHS` (``/health``, the API's own description:
``/openapi.json``, ``/docs``, ``/redoc``, and the console's static pages under ``/ui/``)
needs ``Authorization: Bearer <token>``; a token acts for exactly one owner (see :mod:`prme_pg.tokens`), so no route
takes a user_id. A request body must be JSON (415 otherwise); a created resource's 201
(or an accepted operation's 202) carries its ``Location``.
Errors are RFC 9457 problem+json whose ``type`` names the SQLSTATE. A retried
confirmation with the same ``Idempotency-Key`` counts once and is answered with
``Idempotent-Replayed: true``. Install with the ``http`` extra; serve with
``prme-pg serve``.

One module per capability holds its ``router``, its request and response models and
its handlers; handlers ask for the client and the token's owner through the
dependencies ``Client`` and ``Owner`` (:mod:`.dependencies`) and raise prme_pg's
errors, which :mod:`.problems` answers as problem+json. To add a capability, write
``prme_pg/http/<name>.py`` with ``router = APIRouter()`` and add it to ``ROUTERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, FastAPI

from .. import __version__
from ..aio import AsyncMemoryClient
from . import console, ledger, maintenance, nodes, ops, recall, review
from .dependencies import json_body
from .problems import EXCEPTION_HANDLERS

if TYPE_CHECKING:
    from ..metrics import ServiceMetrics

__all__ = ["PUBLIC_PATHS", "ROUTERS", "create_app"]

#: What answers without a token: liveness, the API's description, and the review console's
#: static pages (every path under /ui/; the page asks for a token and sends it with each API
#: call). None of them holds data.
PUBLIC_PATHS = ("/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/ui/")

# In this order in the OpenAPI document (the console's pages are not in it).
ROUTERS: tuple[APIRouter, ...] = (
    ops.router,
    nodes.router,
    review.router,
    recall.router,
    maintenance.router,
    ledger.router,
    console.router,
)


def create_app(client: AsyncMemoryClient, *, metrics: ServiceMetrics | None = None) -> FastAPI:
    """The ASGI app over an (unopened) client; the app opens and closes it.

    With ``metrics``, every request is counted and timed into it (:mod:`.metrics`; the
    ``/metrics`` route is served by :func:`.metrics.metrics_app`, on a bind of its own).
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with client:
            yield

    app = FastAPI(
        title="prme-pg",
        version=__version__,
        description="A memory engine for AI agents: confirm, correct and audit memories.",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
        dependencies=[Depends(json_body)],
    )
    app.state.client = client  # what the Client dependency hands to each route
    for router in ROUTERS:
        app.include_router(router)
    if metrics is not None:
        from .metrics import MetricsMiddleware  # prometheus-client only when metrics are on

        app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
