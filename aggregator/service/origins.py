"""Which web pages may talk to the service from a browser (CORS), and to what.

A survey page served by the app (not by the service) runs the JavaScript participant in the
respondent's browser, which sends the page's origin with every request it makes to another
origin. Such a page may do what a participant does, and nothing else: read a collection's spec
(``GET /collections/{id}``), post reports (``POST /collections/{id}/reports``) and, for a shuffled
collection taking reports only from enrolled people, obtain a report's anonymous token with the
person's code (``POST /collections/{id}/tokens``), from an origin the operator named (``serve
--allow-origin https://survey.example.org``). Those routes, their preflights and their answers,
carry ``Access-Control-Allow-Origin`` for that origin alone, and never
``Access-Control-Allow-Credentials``: a browser sends no cookie or password with them.

Every other request that names an origin is refused, 403 with a JSON error, before it reaches a
handler: the admin routes, ``/metrics`` and the model from any page, and the participant's routes
from pages the operator did not name (their refusal is readable by the page, so that a survey page
says it is not allowed instead of "failed to fetch"). Requests without an ``Origin`` (the Python
participant, the operator's tools, the status page's own reads) are not touched, and neither are
requests from the service's own public address (``serve --public-url``), which is configured,
never read off the request's ``Host`` header (a page at a name that resolves to the service would
otherwise pass as the service itself).
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
# What a participant calls: a collection's spec, its reports and its anonymous tokens.
PARTICIPANT_ROUTE = re.compile(r"^/collections/[^/]+(/reports|/tokens)?$")


def check_origin(text: str) -> str:
    """``text`` as an origin the service may allow (``scheme://host[:port]``, lower-case), or ValueError."""
    origin = text.strip().rstrip("/").lower()
    if not ORIGIN.match(origin):
        raise ValueError(f"an origin is scheme://host[:port] with no path, got {text!r}")
    return origin


ALLOWED = web.RequestKey("cors_origin", str)  # the page's origin a response to this request is shared with


def _allow(response: web.StreamResponse, origin: str) -> web.StreamResponse:
    response.headers["Access-Control-Allow-Origin"] = origin
    # A page reads Retry-After (not a CORS-safelisted header) only when told it may: its
    # participant waits what a 429 or 503 asks.
    response.headers["Access-Control-Expose-Headers"] = "Retry-After"
    response.headers["Vary"] = "Origin"
    return response


async def cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a response streamed by its handler (a large spec, sent in slices)
    is prepared before the middleware sees it; its CORS headers are added here, as it is sent."""
    origin = request.get(ALLOWED)
    if origin is not None:
        _allow(response, origin)


@web.middleware
async def origin_middleware(request: web.Request, handler):
    """Answer a named page's participant requests and their preflights with CORS headers; refuse
    every other request that names an origin; leave requests without one alone."""
    origin = request.headers.get("Origin")
    config = request.app[CONFIG]
    if origin is None or origin.lower() == config.public_origin:
        return await handler(request)
    participant = PARTICIPANT_ROUTE.match(request.path) is not None and request.method in ("GET", "POST", "OPTIONS")
    if origin.lower() not in config.allowed_origins:
        refused = json_error(403, f"requests from the web page at {origin[:100]} are not allowed (serve --allow-origin)")
        # A participant's page may read why its first request, the spec's, was refused (the answer
        # says nothing more); a report's preflight is refused outright.
        return _allow(refused, origin) if participant and request.method == "GET" else refused
    if not participant:
        return json_error(403, "a web page may only read a collection's spec and post reports and token requests to it")
    if request.method == "OPTIONS":
        answer = web.Response(status=204)
        answer.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
        answer.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        answer.headers["Access-Control-Max-Age"] = PREFLIGHT_SECONDS
        return _allow(answer, origin)
    request[ALLOWED] = origin
    return await handler(request)
