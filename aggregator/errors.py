"""JSON error responses: every 4xx and 5xx answer is ``{"error": message, "status": code, ...}``."""

from __future__ import annotations

import logging
import time

from aiohttp import web

from .store import StoreUnavailable

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


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Render :class:`APIError`, aiohttp's own plain-text errors (404, 405, 413, ...) and crashes as
    JSON; refuse request bodies with a Content-Encoding (415): the service never inflates a body."""
    encoding = request.headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        return json_error(415, f"request bodies are accepted unencoded only, not with Content-Encoding {encoding!r}")
    try:
        return await handler(request)
    except APIError as exc:
        return json_error(exc.status, str(exc), exc.headers, **exc.extra)
    except StoreUnavailable as exc:
        log_unavailable(request, exc.detail)
        return json_error(503, unavailable_message(request, exc), {"Retry-After": RETRY_AFTER})
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in _PASSED_HEADERS}
        return json_error(exc.status, exc.text or exc.reason, headers)
    except ConnectionError:
        log.info("client went away during %s %s", request.method, request.path)
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal error; the request was not applied")
