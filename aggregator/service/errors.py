"""JSON error responses: every 4xx and 5xx answer is ``{"error": message, "status": code, ...}``."""

from __future__ import annotations

import logging
import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ..store import StoreUnavailable
from ..store.base import COLLECTION_ID
from .keys import METRICS, STORE
from .metrics import UNKNOWN_COLLECTION

# The application's body limit (bytes), which the middleware reads: set by create_app.
MAX_BODY = web.AppKey("max_body_bytes", int)

log = logging.getLogger("ldpnb.aggregator")
_PASSED_HEADERS = {"allow", "www-authenticate", "retry-after"}
#: What a 503 asks clients to wait before retrying while the database is away (seconds).
RETRY_AFTER = "5"
_LOG_EVERY = 5.0  # seconds between log lines about an unavailable database (a flood answers 503s by thousands)
_unavailable_log = {"next": 0.0, "quiet": 0}


def log_unavailable(request: web.Request, detail: str) -> None:
    """Log ``detail`` at most once per :data:`_LOG_EVERY` seconds, with how many were left out."""
    now = time.monotonic()
    if now < _unavailable_log["next"]:
        _unavailable_log["quiet"] += 1
        return
    quiet, _unavailable_log["quiet"], _unavailable_log["next"] = _unavailable_log["quiet"], 0, now + _LOG_EVERY
    more = f" (and {quiet} more since the last line)" if quiet else ""
    log.warning("503 on %s %s: %s%s", request.method, request.path, detail, more)


def unavailable_message(request: web.Request, exc: StoreUnavailable) -> str:
    """What a client is told: why (never where), and what became of what it sent."""
    if exc.maybe_stored:
        return f"{exc}; the reports may have been stored: re-send the same ones (a re-send is counted once)"
    if request.method == "POST":
        return f"{exc}; nothing was stored"
    return f"{exc}; retry later"


class APIError(Exception):
    """An error answer: HTTP ``status``, a message saying what is wrong, and extra JSON fields."""

    def __init__(self, status: int, message: str, headers: dict | None = None, **extra):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.extra = extra


def json_error(status: int, message: str, headers=None, **extra) -> web.Response:
    return web.json_response({"error": message, "status": status, **extra}, status=status, headers=headers)


def refused(request: web.Request, max_body: int) -> web.Response | None:
    """The answer to a request the service takes no part of, before any handler or body read; None
    for the others: HTTP/0.9 and any version but 1.0 and 1.1 (505), a target that is not a path
    (an absolute URI or ``*``: 400), a body with a Content-Encoding (415: the service never
    inflates one), a declared length past the body limit (413, closing the connection, the body
    unread)."""
    if request.version not in ((1, 0), (1, 1)):
        return json_error(505, "this service speaks HTTP/1.0 and HTTP/1.1 only")
    if not request.raw_path.startswith("/"):
        return json_error(400, "the request target must be a path (origin form), not an absolute URI")
    encoding = request.headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        return json_error(415, f"request bodies are accepted unencoded only, not with Content-Encoding {encoding!r}")
    if request.content_length is not None and request.content_length > max_body:
        response = json_error(
            413, f"the request body's size ({request.content_length} bytes declared) passes the limit of {max_body}"
        )
        response.force_close()
        return response
    return None


async def count_too_large(request: web.Request, collection_id: str) -> None:
    """Count a report body refused for its size against its collection, or the unknown label for
    an id no collection has (a stranger's ids must not become series)."""
    try:
        known = COLLECTION_ID.fullmatch(collection_id) and await request.app[STORE].collection(collection_id)
    except StoreUnavailable:
        known = None
    request.app[METRICS].reject(collection_id if known else UNKNOWN_COLLECTION, "too_large")


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Render :class:`APIError`, aiohttp's own plain-text errors (404, 405, 413, ...) and crashes as
    JSON, after refusing what :func:`refused` refuses."""
    answer = refused(request, request.app[MAX_BODY])
    if answer is not None:
        if answer.status == 413 and "collection_id" in request.match_info:  # a report body: counted as refused
            await count_too_large(request, request.match_info["collection_id"])
        return answer
    try:
        return await handler(request)
    except APIError as exc:
        return json_error(exc.status, str(exc), exc.headers, **exc.extra)
    except StoreUnavailable as exc:
        log_unavailable(request, exc.detail)
        return json_error(503, unavailable_message(request, exc), {"Retry-After": RETRY_AFTER})
    except HttpProcessingError as exc:  # a body that breaks the framing while it is read (chunks, length)
        return json_error(400, f"malformed request body: {exc.message}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in _PASSED_HEADERS}
        if isinstance(exc, web.HTTPRequestEntityTooLarge):  # a body without a declared length, read past the limit
            return json_error(413, f"the request body passes the limit of {request.app[MAX_BODY]} bytes", headers)
        return json_error(exc.status, exc.text or exc.reason, headers)
    except ConnectionError:
        # The client went away while its body was read: nothing to answer it, a line in the log
        # (re-raised, aiohttp logged a traceback for every such client).
        log.info("connection lost during %s %s", request.method, request.path)
        return json_error(400, "the connection was lost before the request body arrived")
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal error; the request was not applied")


async def server_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: name the service, not its language and framework's versions."""
    response.headers["Server"] = "ldpnb"
