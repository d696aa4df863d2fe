"""Request bodies parsed strictly (issue 17, items 4 and 8): every router's routes use
:class:`StrictJSONRoute`.

Starlette parses a body with ``json.loads``: ``NaN``, ``Infinity`` and ``1e400`` became
floats that failed later (500), a duplicate key silently kept its last value, numbers
became floats (``0.10000000000000000001`` was stored as ``0.1``), and a body nested a few
hundred levels deep was stored and then could not be serialised back (500, and a
retry stored it again). Here a body is parsed by :func:`prme_pg.validation.loads_strict`
(one level more than ``MAX_JSON_DEPTH`` for the request's own envelope, so a payload
inside it may nest as deep as anywhere else); what it refuses is answered 422 before
anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from ..errors import InvalidInput
from ..validation import MAX_JSON_DEPTH, JSONTooDeep, loads_strict

__all__ = ["BODY_DEPTH", "StrictJSONRequest", "StrictJSONRoute"]

#: A body is an envelope around what the engine stores (a payload): one level more.
BODY_DEPTH = MAX_JSON_DEPTH + 1


class StrictJSONRequest(Request):
    """A request whose ``json()`` is :func:`~prme_pg.validation.loads_strict`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = loads_strict(body, "the request body", BODY_DEPTH)
            except JSONTooDeep:
                reason = f"the request body nests too deeply: a payload may nest at most {MAX_JSON_DEPTH} levels deep"
                raise json.JSONDecodeError(reason, "", 0) from None
            except InvalidInput as exc:
                # FastAPI answers a JSONDecodeError as a 422 validation error carrying its msg.
                raise json.JSONDecodeError(str(exc), "", 0) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose request body is parsed by :class:`StrictJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
