"""Connection handling below the handlers of both services, the aggregator and the shuffler: fair
caps on open connections, and JSON answers for what aiohttp's HTTP parser refuses before any
handler runs (malformed requests, oversized lines). It lives here, the lowest layer both services
stand on (the shuffler stands on the participant package alone, as :mod:`participant.usage` says),
and needs only aiohttp, a core dependency; an app that embeds the device never imports it.

Slots are shared fairly: peers are grouped by network (by default an IPv4 /24 and an IPv6 /64,
what one party usually holds; ``serve --slot-prefix``), each group holds at most ``max_per_address`` connections, and when every
slot is taken a newcomer from a group holding fewer than the largest group takes the slot of that
group's longest-idle connection (closed), so that a few groups keeping their connections busy
cannot starve everyone else. A newcomer from the largest group itself is answered 503 with
Retry-After. Trusted proxies carry many devices and are neither capped nor evicted.

aiohttp already closes a connection that sends no complete request within its keep-alive timeout
(from the moment it opens, so idle sockets and slowly dripped headers are bounded); request
bodies are bounded by the handlers' body timeout.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("ldpnb.serving")

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
        response = web.Response(status=status, text=body, content_type="application/json", headers={"Server": "ldpnb"})
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


#: The prefixes peers are grouped by when none is configured: (IPv4 bits, IPv6 bits).
DEFAULT_SLOT_PREFIX = (24, 64)
SLOT_PREFIX_RANGES = ((16, 32), (48, 64))


def network_of(peer: str, prefix: tuple[int, int] = DEFAULT_SLOT_PREFIX) -> str:
    """The group a peer address counts in: its IPv4 network of ``prefix[0]`` bits or its IPv6
    network of ``prefix[1]`` (an IPv4-mapped IPv6 address as its IPv4), or the text itself for
    what is not an address."""
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    bits = prefix[0] if address.version == 4 else prefix[1]
    return str(ipaddress.ip_network(f"{address}/{bits}", strict=False))


class _Counted(JSONErrorRequestHandler):
    """:class:`JSONErrorRequestHandler` that counts itself in its peer's group while open, and
    notes when it last received bytes (how idle it is, for eviction)."""

    def __init__(self, capped: CappedServer, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._capped, self._group, self._admitted = capped, "", False
        self.last_active = time.monotonic()

    def connection_made(self, transport) -> None:
        peername = transport.get_extra_info("peername")
        peer = peername[0] if isinstance(peername, tuple) else ""
        refusal = self._capped.admit(self, peer)
        if refusal is not None:
            _refuse(transport, refusal)
            return
        self._admitted = True
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        super().data_received(data)

    def connection_lost(self, exc) -> None:
        if not self._admitted:
            return
        self._capped.release(self)
        super().connection_lost(exc)

    def evict(self) -> None:
        """Close this connection to make room (its peer may reconnect; a request in flight is cut,
        and its client retries it)."""
        if self.transport is not None:
            self.transport.close()


class CappedServer:
    """A protocol factory around aiohttp's ``web.Server`` keeping the module's fair caps: at most
    ``max_connections`` open at once and ``max_per_address`` from one peer group, each connection
    handled by :class:`JSONErrorRequestHandler`. Addresses in ``uncapped`` (trusted proxies,
    whose connections carry many devices) are neither capped per group nor evicted."""

    def __init__(
        self, server: web.Server, max_connections: int, max_per_address: int, uncapped=lambda peer: False,
        prefix: tuple[int, int] = DEFAULT_SLOT_PREFIX,
    ):  # fmt: skip
        self._server = server
        self.prefix = prefix
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self._uncapped = uncapped
        self.groups: dict[str, set[_Counted]] = {}
        self.open = 0

    def admit(self, handler: _Counted, peer: str) -> str | None:
        """Count ``handler`` in (evicting another where the module's note says); else the 503's
        message."""
        trusted = self._uncapped(peer)
        group = "" if trusted else network_of(peer, self.prefix)
        members = self.groups.get(group, set())
        if not trusted and len(members) >= self.max_per_address:
            return "this address holds its maximum number of connections; retry later"
        if self.open >= self.max_connections:
            largest = max((g for g in self.groups if g), key=lambda g: len(self.groups[g]), default=None)
            if largest is None or len(self.groups[largest]) <= len(members):
                return "the service holds its maximum number of connections; retry later"
            idle = min(self.groups[largest], key=lambda h: h.last_active)
            self._forget(idle)
            idle.evict()
        handler._group = group
        self.groups.setdefault(group, set()).add(handler)
        self.open += 1
        return None

    def release(self, handler: _Counted) -> None:
        if handler._group is not None:
            self._forget(handler)

    def _forget(self, handler: _Counted) -> None:
        members = self.groups.get(handler._group)
        if members is not None and handler in members:
            members.discard(handler)
            self.open -= 1
            if not members:
                del self.groups[handler._group]
        handler._group = None

    def __call__(self) -> asyncio.Protocol:
        # The keyword arguments the runner gave its server (timeouts, limits, decompression).
        return _Counted(self, self._server, loop=self._server._loop, **self._server._kwargs)

    def __getattr__(self, name):
        return getattr(self._server, name)


class CappedRunner(web.AppRunner):
    """An ``AppRunner`` whose sites accept through a :class:`CappedServer`."""

    def __init__(
        self, app: web.Application, max_connections: int, max_per_address: int, uncapped,
        prefix: tuple[int, int] = DEFAULT_SLOT_PREFIX, **kwargs,
    ):  # fmt: skip
        super().__init__(app, **kwargs)
        self.max_connections, self.max_per_address, self.uncapped = max_connections, max_per_address, uncapped
        self.prefix = prefix

    async def _make_server(self):
        server = await super()._make_server()
        return CappedServer(server, self.max_connections, self.max_per_address, self.uncapped, self.prefix)
