"""JSON error responses: every 4xx and 5xx answer is ``{"error": message, "status": code, ...}``."""

from __future__ import annotations

import logging

from aiohttp import web

from .store import StoreUnavailable

log = logging.getLogger("ldpnb.aggregator")
_PASSED_HEADERS = {"allow", "www-authenticate", "retry-after"}


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
        return json_error(503, f"{exc}; nothing was stored", {"Retry-After": "30"})
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
