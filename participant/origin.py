"""A service's address as the device keys it: one spelling per address, as a browser parses it.

The ledger refuses a second report to a collection id at an origin, so two spellings of one
address must give one origin. The rules follow the WHATWG URL standard's host and path parsing:
the host is percent-decoded and lower-cased, a trailing dot dropped, international names turned to
their ASCII (IDNA) form, and every IPv4 form (``127.1``, ``2130706433``, ``0x7f.0.0.1``,
``0177.0.0.1``, an IPv4-mapped IPv6 address) written as four decimals; the default port goes, as
do user information, empty and dot segments of the path (``/x/..``, ``/%2e/``) and a trailing
slash; percent-escapes of unreserved characters are decoded and the others written upper-case.

Names that resolve to one machine (``localhost`` and ``127.0.0.1``) stay two origins, as in a
browser: the device's budget does not depend on the origin, and a second origin asking a question
gets a fresh draw, counted, never the first's answer (:mod:`participant.ledger`).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote, urlsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _ipv4_number(part: str) -> int | None:
    """One part of a WHATWG IPv4 address (decimal, ``0x`` hex or ``0``-prefixed octal), or None."""
    try:
        if part[:2] in ("0x", "0X"):
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _ipv4(host: str) -> str | None:
    """``host`` as a dotted-decimal IPv4 address if a browser would read it as one, else None."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4 or not all(parts):
        return None
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers) or any(n > 255 for n in numbers[:-1]):
        return None
    if numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return str(ipaddress.IPv4Address(value))


def _host(raw: str) -> str:
    """The host as a browser keys it: an IP address in its one form, or an ASCII domain name."""
    if raw.startswith("["):
        address = ipaddress.IPv6Address(raw[1:-1].split("%", 1)[0])
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else f"[{address.compressed}]"
    host = unquote(raw)
    if not host.isascii():
        # UTS #46 (nontransitional), as the URL standard and so browsers and participant-js map a
        # name: Python's own "idna" codec (IDNA 2003) makes faß and fass one host, which they are not.
        host = idna.uts46_remap(host, std3_rules=False, transitional=False)
    host = host.lower()
    if host.endswith(".") and len(host) > 1:
        host = host[:-1]
    ipv4 = _ipv4(host)
    if ipv4 is not None:
        return ipv4
    if not host.isascii():
        try:
            host = idna.encode(host).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"not a host name: {raw!r} ({exc})") from None
    if not host or any(c in host for c in " #%/:<>?@[\\]^|"):
        raise ValueError(f"not a host name: {raw!r}")
    return host


def _escapes(segment: str) -> str:
    """Unreserved characters' escapes decoded, the others' hex digits upper-cased."""

    def one(match: re.Match) -> str:
        byte = int(match.group(1), 16)
        return chr(byte) if byte in _UNRESERVED else f"%{byte:02X}"

    return _ESCAPE.sub(one, segment)


def _path(raw: str) -> str:
    """The path with empty and dot segments resolved and no trailing slash (``""`` for the root)."""
    kept: list[str] = []
    for segment in raw.split("/"):
        segment = _escapes(segment)
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    return "".join("/" + s for s in kept)


def normalise_origin(base_url: str) -> str:
    """The service address ``base_url`` in the one spelling the ledger keys by: ``scheme://host[:port][/path]``.

    ``HTTP://Host.:80//api/x/../`` and ``http://host/api`` are one origin, as are ``http://127.1``,
    ``http://2130706433`` and ``http://[::ffff:127.0.0.1]``. Raises ``ValueError`` for an address
    that is not an http(s) URL with a host, or that carries a query or fragment."""
    if not isinstance(base_url, str):
        raise ValueError(f"the aggregator's address must be a string, got {type(base_url).__name__}")
    try:
        parts = urlsplit(base_url.strip())
        scheme = parts.scheme.lower()
        netloc = parts.netloc.rpartition("@")[2]  # user information is not part of an origin
        raw_host = netloc[: netloc.index("]") + 1] if netloc.startswith("[") else netloc.rsplit(":", 1)[0]
        port = parts.port
        if scheme not in DEFAULT_PORTS or not raw_host:
            raise ValueError("no http(s) scheme or no host")
        if parts.query or parts.fragment:
            raise ValueError("a query or fragment")
        host = _host(raw_host)
    except ValueError as exc:
        what = f"the aggregator's address must be an http(s) URL with a host, got {base_url!r}"
        raise ValueError(f"{what} ({exc})") from None
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host += f":{port}"
    return f"{scheme}://{host}{_path(parts.path)}"
