"""HTTP plumbing the aggregator's handlers share: bodies read within their limits, answers in
JSON or msgpack (gzip when asked, large ones in slices), the collection a path names, the
admin check, work moved off the event loop."""

from __future__ import annotations

import asyncio
import json

import msgpack
from aiohttp import web

from participant.addresses import client_address
from participant.wire import ReportError, unpack

from ..store import Collection
from ..store.base import COLLECTION_ID
from .auth import SETTING_KEY, require_admin
from .errors import APIError
from .keys import ADMIN_FAILURES, CONFIG, STORE


MSGPACK = "application/msgpack"
MSGPACK_TYPES = {MSGPACK, "application/x-msgpack", "application/vnd.msgpack"}


def wants_msgpack(request: web.Request) -> bool:
    """Whether the Accept header names a msgpack type (the plain substring test first: it is
    nearly always false)."""
    accept = request.headers.get("Accept", "")
    return "msgpack" in accept and any(t in accept for t in MSGPACK_TYPES)


def respond(request: web.Request, data, status: int = 200) -> web.Response:
    """JSON, or msgpack when the client's Accept header asks for it."""
    if wants_msgpack(request):
        return web.Response(body=msgpack.packb(data), status=status, content_type=MSGPACK)
    return web.json_response(data, status=status)


# The answer to nearly every request, a single report's outcome, encoded once (as respond() would).
_OUTCOME_BODIES = {
    outcome: (json.dumps({"status": outcome}).encode(), msgpack.packb({"status": outcome}))
    for outcome in ("accepted", "duplicate")
}


def respond_outcome(request: web.Request, outcome: str) -> web.Response:
    """:func:`respond` of ``{"status": outcome}``: 201 for a new report, 200 for a duplicate."""
    as_json, as_msgpack = _OUTCOME_BODIES[outcome]
    status = 201 if outcome == "accepted" else 200
    if wants_msgpack(request):
        return web.Response(body=as_msgpack, status=status, content_type=MSGPACK)
    return web.Response(body=as_json, status=status, content_type="application/json", charset="utf-8")


async def read_raw(request: web.Request) -> bytes:
    """The request body; 408 when it does not arrive within the configured time, 413 past the size limit."""
    if request.content.is_eof():  # already all here (most reports): no timer needed
        return await request.read()
    try:
        async with asyncio.timeout(request.app[CONFIG].body_timeout):
            return await request.read()
    except TimeoutError:
        raise APIError(408, "the request body did not arrive in time") from None


def source(request: web.Request) -> str:
    """The address rate limits count the request against (the device's, behind a trusted proxy)."""
    return client_address(request, request.app[CONFIG].trusted_proxies)


async def admin(request: web.Request) -> None:
    """Raise unless the request carries the admin token stored in the database (read on each
    call, so a rotation on any instance holds on all)."""
    token_hash = await request.app[STORE].get_setting(SETTING_KEY)
    require_admin(request, token_hash, request.app[ADMIN_FAILURES], source(request))


async def off_loop(function, *args):
    """``function(*args)`` on a worker thread: large models and answers never stall the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


# Bodies above this many bytes are decoded on a worker thread: an 8 MiB JSON array took 1.6 s.
DECODE_ON_LOOP = 64 * 1024


async def read_body(request: web.Request):
    """The request body decoded from JSON or msgpack by its Content-Type (413 past the size limit),
    off the event loop when it is large."""
    body = await read_raw(request)

    async def decoded(decode):
        return decode(body) if len(body) <= DECODE_ON_LOOP else await off_loop(decode, body)

    if request.content_type in MSGPACK_TYPES:
        try:
            return await decoded(unpack)
        except ReportError as exc:
            raise APIError(400, str(exc), reason="malformed") from None
    if request.content_type == "application/json":
        try:
            return await decoded(json.loads)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, and integers past Python's digit limit
            raise APIError(400, f"body is not valid JSON: {exc}", reason="malformed") from None
        except RecursionError:
            raise APIError(400, "body is not valid JSON: nested too deeply", reason="malformed") from None
    raise APIError(415, f"send application/json or {MSGPACK}, not {request.content_type!r}")


def collection_id_of(request: web.Request) -> str:
    """The path's collection id; 400 for one no collection can have (a NUL byte would reach the
    database as a query parameter it refuses)."""
    collection_id = request.match_info["collection_id"]
    if not COLLECTION_ID.fullmatch(collection_id):
        raise APIError(400, "a collection id is 1-64 letters, digits, '-' or '_'")
    return collection_id


async def get_collection(request: web.Request) -> Collection:
    collection_id = collection_id_of(request)
    collection = await request.app[STORE].collection(collection_id)
    if collection is None:
        raise APIError(404, f"no collection {collection_id!r}")
    return collection


# A wide model's 44 MB of JSON compresses on a worker thread, once per answer, in about 0.15 s.
GZIP_LEVEL = 6


def accepts_gzip(request: web.Request) -> bool:
    """Whether the client asked for gzip (``Accept-Encoding``, a zero quality refusing it)."""
    for token in request.headers.get("Accept-Encoding", "").lower().split(","):
        name, _, params = token.strip().partition(";")
        if name.strip() in ("gzip", "x-gzip"):
            quality = params.strip().removeprefix("q=")
            try:
                return not params.strip() or float(quality) > 0
            except ValueError:
                return False
    return False


SEND_SLICE = 256 * 1024


async def send_in_slices(
    request: web.Request, body: bytes, content_type: str, headers: dict | None = None
) -> web.StreamResponse:
    """``body`` written a slice at a time, each after the last has drained: a 40 MB answer handed
    to the transport whole is copied (sliced, joined, buffered) on the event loop's thread, tens of
    milliseconds a copy, and several at once stall every other request."""
    response = web.StreamResponse(headers={"Content-Type": content_type, **(headers or {})})
    response.content_length = len(body)
    await response.prepare(request)
    view = memoryview(body)
    for start in range(0, len(body), SEND_SLICE):
        await response.write(view[start : start + SEND_SLICE])
    await response.write_eof()
    return response
