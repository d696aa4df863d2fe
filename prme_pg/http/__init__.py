"""The HTTP API: FastAPI over :class:`~prme_pg.AsyncMemoryClient`.

Every route but the public ones (:func:`is_public`: ``/health``, ``/ready``, the API's own
description: ``/openapi.json``, ``/docs``, ``/redoc``, and the console's static pages under
``/ui/``) needs ``Authorization: Bearer <token>``; a token acts for exactly one owner
(see :mod:`prme_pg.tokens`), so no route takes a user_id. A request body must be JSON
(415 otherwise); a created resource's 201 (or an accepted operation's 202) carries its
``Location``. Errors are RFC 9457 problem+json whose ``type`` names the SQLSTATE. A retried
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

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import psycopg
from fastapi import APIRouter, Depends, FastAPI

from .. import __version__
from ..aio import AsyncMemoryClient
from ..errors import PrmeError
from . import console, ledger, maintenance, nodes, ops, recall, review
from .dependencies import json_body, known_query
from .gate import PUBLIC_PATHS, PUBLIC_PREFIX, OwnerGate, TrustedLoopback, is_public
from .limits import Limits, uvicorn_options
from .problems import EXCEPTION_HANDLERS, problem_responses

if TYPE_CHECKING:
    from ..metrics import ServiceMetrics

__all__ = [
    "PUBLIC_PATHS",
    "PUBLIC_PREFIX",
    "ROUTERS",
    "Limits",
    "TrustedLoopback",
    "create_app",
    "is_public",
    "uvicorn_options",
]

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


def create_app(
    client: AsyncMemoryClient,
    *,
    limits: Limits | None = None,
    metrics: ServiceMetrics | None = None,
    trusted: TrustedLoopback | None = None,
) -> FastAPI:
    """The ASGI app over an (unopened) client; the app opens and closes it.

    ``limits`` bound what one request and one owner may cost (:mod:`.limits`; the header
    limit is the server's: serve the app with ``uvicorn_options(limits)``). With
    ``metrics``, every request is counted and timed into it (:mod:`.metrics`; the
    ``/metrics`` route is served by :func:`.metrics.metrics_app`, on a bind of its own).
    ``trusted`` turns trusted loopback mode on for the ledger's routes (:mod:`.gate`; serve the
    app on a loopback bind only: ``prme-pg serve --trusted-loopback`` refuses any other).
    """
    limits = limits or Limits()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with client:
            try:
                await client.warm_up()
            except (PrmeError, psycopg.Error) as exc:  # /ready says so; recall falls back to words
                logging.getLogger("prme_pg.http").warning("the embedder could not be warmed up: %s", exc)
            yield

    app = FastAPI(
        title="prme-pg",
        version=__version__,
        description="A memory engine for AI agents: confirm, correct and audit memories.",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
        dependencies=[Depends(json_body), Depends(known_query)],
    )
    app.state.client = client  # what the Client dependency hands to each route
    app.state.limits = limits
    pool = getattr(client.backend, "pool", None)
    app.add_middleware(
        OwnerGate,
        limits=limits,
        requests_per_owner=limits.requests_per_owner(pool and pool.max_size),
        routes=[route for router in ROUTERS for route in router.routes],
        trusted=trusted,
    )
    for router in ROUTERS:
        # Every route but the public ones (ops, the console's pages) may meet the gate's limits.
        public = router in (ops.router, console.router)
        app.include_router(router, responses={} if public else problem_responses(413, 429))
    if metrics is not None:
        from .metrics import MetricsMiddleware  # prometheus-client only when metrics are on

        # Added last, so outermost: it also counts what the owner gate refuses.
        app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
