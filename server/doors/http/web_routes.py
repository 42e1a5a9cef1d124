"""The web page at ``/``: text and file translation in a browser, served by the
server itself from the installed package (``attnserve/server/web``), no CDN and no network.

The page is static (HTML, one stylesheet, one vanilla-JS script) and talks to the server's
own LibreTranslate routes (``/languages``, ``/frontend/settings``, ``/translate``,
``/translate_file``, ``/download_file``), so it needs nothing the API does not offer and
works with api keys (a key field, kept in the browser's localStorage). The page and its
assets are open routes, untracked like health probes: a page load is not an inference call.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from ...shared.calls import Call
from .table import RouteTable

ASSETS = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
# The page runs only its own script and style, and talks only to this server.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, bytes]:
    folder = resources.files("attnserve.server.web")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def add_routes(table: RouteTable) -> None:
    assets = load_assets()  # read once: a few KB

    def serve(name: str):
        async def handler(request: web.Request, call: Call) -> web.Response:
            return web.Response(body=assets[name], content_type=ASSETS[name], charset="utf-8", headers=SECURITY_HEADERS)

        return handler

    table.route("GET", "/", serve("index.html"), label="web.page", open=True, tracked=False)
    for name in ASSETS:
        table.route("GET", f"/static/{name}", serve(name), label="web.asset", open=True, tracked=False)
