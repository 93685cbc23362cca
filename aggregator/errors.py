"""JSON error responses: every 4xx and 5xx answer is ``{"error": message, "status": code, ...}``."""

from __future__ import annotations

import logging

from aiohttp import web

log = logging.getLogger("ldpnb.aggregator")
_PASSED_HEADERS = {"allow", "www-authenticate", "retry-after"}


class APIError(Exception):
    """An error answer: HTTP ``status``, a message saying what is wrong, and extra JSON fields."""

    def __init__(self, status: int, message: str, headers: dict | None = None, **extra):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.extra = extra


def _json(status: int, message: str, headers=None, **extra) -> web.Response:
    return web.json_response({"error": message, "status": status, **extra}, status=status, headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Render :class:`APIError`, aiohttp's own plain-text errors (404, 405, 413, ...) and crashes as JSON."""
    try:
        return await handler(request)
    except APIError as exc:
        return _json(exc.status, str(exc), exc.headers, **exc.extra)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in _PASSED_HEADERS}
        return _json(exc.status, exc.text or exc.reason, headers)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _json(500, "internal error; the request was not applied")
