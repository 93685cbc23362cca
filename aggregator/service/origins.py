"""Which web pages may talk to the service from a browser (CORS).

A survey page served by the app (not by the service) runs the JavaScript participant in the
respondent's browser, which sends the page's origin with every request it makes to another
origin. The service answers such a request only from an origin the operator named (``serve
--allow-origin https://survey.example.org``): the preflight that a report's msgpack body needs,
and the request itself, get ``Access-Control-Allow-Origin`` for that origin alone. A request from
any other page is refused, 403 with a JSON error, before it reaches a handler, so that no page
an operator did not name can make a visitor's browser report, create or read anything. Requests
without an ``Origin`` (the Python participant, the operator's tools) and from the service's own
status page (its own origin) are not affected.
"""

from __future__ import annotations

import re

from aiohttp import web

from .errors import json_error
from .keys import CONFIG

# A serialised origin as browsers send it: scheme, host, optional port, nothing else.
ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")
ALLOWED_METHODS = "GET, POST"
ALLOWED_HEADERS = "Content-Type, Accept"
PREFLIGHT_SECONDS = "600"


def check_origin(text: str) -> str:
    """``text`` as an origin the service may allow (``scheme://host[:port]``, lower-case), or ValueError."""
    origin = text.strip().rstrip("/").lower()
    if not ORIGIN.match(origin):
        raise ValueError(f"an origin is scheme://host[:port] with no path, got {text!r}")
    return origin


def _allow(response: web.StreamResponse, origin: str) -> web.StreamResponse:
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Vary"] = "Origin"
    return response


@web.middleware
async def origin_middleware(request: web.Request, handler):
    """Answer preflights and requests from the allowed origins with their CORS headers; refuse
    requests from any other page's origin; leave requests without an origin alone."""
    origin = request.headers.get("Origin")
    if origin is None or origin == f"{request.scheme}://{request.host}":
        return await handler(request)
    if origin.lower() not in request.app[CONFIG].allowed_origins:
        return json_error(403, f"requests from the web page at {origin[:100]} are not allowed (serve --allow-origin)")
    if request.method == "OPTIONS":
        answer = web.Response(status=204)
        answer.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
        answer.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        answer.headers["Access-Control-Max-Age"] = PREFLIGHT_SECONDS
        return _allow(answer, origin)
    return _allow(await handler(request), origin)
