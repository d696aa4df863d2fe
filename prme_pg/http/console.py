"""The review console's pages: a static single-page app (prme_pg/ui) served at /ui.

Every path under /ui/ answers with the app's one HTML page (the app routes in the
browser); /ui/assets/ serves its scripts and stylesheet. Nothing is fetched from
elsewhere at run time, and the strict Content-Security-Policy says so: scripts,
styles and API calls come from this server only. The pages need no token: the app
asks for one and sends it to the API routes, which check it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

__all__ = ["ASSETS", "router"]

ASSETS = Path(__file__).resolve().parent.parent / "ui"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _load() -> tuple[bytes, dict[str, tuple[bytes, str]]]:
    page = (ASSETS / "index.html").read_bytes()
    assets = {p.name: (p.read_bytes(), _TYPES[p.suffix]) for p in sorted(ASSETS.iterdir()) if p.suffix in _TYPES}
    return page, assets


_PAGE, _ASSETS = _load()


@router.get("/ui")
async def console_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/assets/{name:path}")
async def console_asset(name: str) -> Response:
    asset = _ASSETS.get(name)
    if asset is None:
        return Response("not found\n", status_code=404, media_type="text/plain", headers=HEADERS)
    body, media_type = asset
    return Response(body, media_type=media_type, headers=HEADERS)


@router.get("/ui/{path:path}")
async def console_page(path: str) -> Response:
    """The app's page for every console path (/ui/memories/…, /ui/maintenance, …)."""
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)
