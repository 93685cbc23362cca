"""Whose request is it: the peer's address, or behind a trusted proxy, the device's.

Rate limits (reports per address, failed admin attempts) key on the device's address, at the
aggregator and at the shuffler alike, so both take their address from here. Behind a load
balancer every connection comes from the balancer, so the operator names it with
``serve --trusted-proxy`` (``python -m aggregator serve`` or ``python -m shuffler serve``); the
address is then the rightmost ``X-Forwarded-For`` entry that is not itself a trusted proxy
(entries to its left are whatever the device chose to send). An entry that is not an IP address
is no address at all: it stops the walk, and the request counts against the proxy, so that
made-up names (``not-an-ip-1``, ``-2``, ...) cannot each pass for a new device.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/8``, ``::1``); raises ``ValueError`` naming a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"--trusted-proxy takes an IP address or network, got {value!r}") from None
    return tuple(networks)


def within(address: str, networks: tuple[Network, ...]) -> bool:
    """Whether ``address`` lies in one of ``networks`` (False for what is not an IP address)."""
    if not networks:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request: web.Request, trusted: tuple[Network, ...]) -> str:
    """The address a request is counted against (see the module's note)."""
    peer = request.remote or ""
    if not within(peer, trusted):
        return peer
    forwarded = [a.strip() for h in request.headers.getall("X-Forwarded-For", []) for a in h.split(",") if a.strip()]
    for address in reversed(forwarded):
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            return peer
        if not within(address, trusted):
            return address
    return peer
