"""Connection handling below the handlers: a cap on open connections, and JSON answers for what
aiohttp's HTTP parser refuses before any handler runs (malformed requests, oversized lines).

aiohttp already closes a connection that sends no complete request within its keep-alive timeout
(from the moment it opens, so idle sockets and slowly dripped headers are bounded); request
bodies are bounded by the handlers' body timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("ldpnb.aggregator")

_MESSAGES = {
    "LineTooLong": "a request line or header is too long",
    "BadHttpMethod": "not an HTTP request",
    "BadStatusLine": "malformed HTTP request line",
    "InvalidHeader": "malformed HTTP header",
}


class JSONErrorRequestHandler(RequestHandler):
    """aiohttp's protocol handler, answering its own errors as the service's JSON errors: no
    request bytes echoed, no traceback logged for what a client sent."""

    def handle_error(self, request, status: int = 500, exc=None, message=None) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        reason = _MESSAGES.get(type(exc).__name__, "malformed HTTP request")
        log.info("refused a request from %s: %s (%s)", request.remote, reason, type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started")
        body = json.dumps({"error": reason, "status": status})
        response = web.Response(status=status, text=body, content_type="application/json")
        response.force_close()
        return response


def _refuse(transport: asyncio.BaseTransport, message: str) -> None:
    """Answer 503 (JSON) and close."""
    body = json.dumps({"error": message, "status": 503})
    transport.write(
        (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n{body}"
        ).encode()
    )
    transport.close()


class _Refuse(asyncio.Protocol):
    """Answers 503 and closes: the server holds its maximum number of connections."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        _refuse(transport, "the service holds its maximum number of connections; retry later")


class _PerAddress(JSONErrorRequestHandler):
    """:class:`JSONErrorRequestHandler` counting its peer's open connections: one over the cap
    is answered 503 and closed before aiohttp sees it."""

    def __init__(self, capped: CappedServer, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._capped, self._peer, self._refused = capped, "", False

    def connection_made(self, transport) -> None:
        peername = transport.get_extra_info("peername")
        self._peer = peername[0] if isinstance(peername, tuple) else ""
        open_here = self._capped.per_address
        if self._capped.capped(self._peer) and open_here.get(self._peer, 0) >= self._capped.max_per_address:
            self._refused = True
            _refuse(transport, "this address holds its maximum number of connections; retry later")
            return
        open_here[self._peer] = open_here.get(self._peer, 0) + 1
        super().connection_made(transport)

    def connection_lost(self, exc) -> None:
        if self._refused:
            return
        left = self._capped.per_address.get(self._peer, 1) - 1
        if left:
            self._capped.per_address[self._peer] = left
        else:
            self._capped.per_address.pop(self._peer, None)
        super().connection_lost(exc)


class CappedServer:
    """A protocol factory around aiohttp's ``web.Server``: at most ``max_connections`` open at
    once and ``max_per_address`` from one peer address (a further one is answered 503 and closed,
    so one address cannot hold every slot), each handled by :class:`JSONErrorRequestHandler`.
    Addresses in ``uncapped`` (trusted proxies, whose connections carry many devices) are not
    capped per address."""

    def __init__(self, server: web.Server, max_connections: int, max_per_address: int, uncapped=lambda peer: False):
        self._server = server
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self._uncapped = uncapped
        self.per_address: dict[str, int] = {}

    def capped(self, peer: str) -> bool:
        return not self._uncapped(peer)

    def __call__(self) -> asyncio.Protocol:
        if len(self._server.connections) >= self.max_connections:
            return _Refuse()
        # The keyword arguments the runner gave its server (timeouts, limits, decompression).
        return _PerAddress(self, self._server, loop=self._server._loop, **self._server._kwargs)

    def __getattr__(self, name):
        return getattr(self._server, name)


class CappedRunner(web.AppRunner):
    """An ``AppRunner`` whose sites accept through a :class:`CappedServer`."""

    def __init__(self, app: web.Application, max_connections: int, max_per_address: int, uncapped, **kwargs):
        super().__init__(app, **kwargs)
        self.max_connections, self.max_per_address, self.uncapped = max_connections, max_per_address, uncapped

    async def _make_server(self):
        return CappedServer(await super()._make_server(), self.max_connections, self.max_per_address, self.uncapped)
