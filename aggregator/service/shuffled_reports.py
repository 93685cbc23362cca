"""What a shuffler sends, and the keys devices seal to: the routes of shuffled collections.

``POST /collections/{id}/shuffled`` takes a batch of sealed reports from the collection's shuffler
(its token, never a device): each is opened with the sealing key the spec names
(:mod:`participant.sealing`), then checked, stored and counted as a report sent directly would be
(:func:`~aggregator.service.handlers.ingest_reports`). A sealed report that does not open
(tampered, another collection's, another length) is refused; one sent again is a duplicate, by
its report id. Opening runs a slice of reports at a time between turns of the event loop.
``GET /keys`` publishes the current sealing key; ``POST /keys`` (admin) rotates it.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from participant.sealing import open_sealed
from participant.wire import ReportError, unpack

from .auth import require_admin
from .errors import APIError
from .handlers import admin, batch_answer, get_collection, ingest_reports, read_raw, rejected, respond, source
from .keys import ADMIN_FAILURES, CONFIG, METRICS, STORE
from .shuffling import current_key, private_key, rotate, shuffler_setting

routes = web.RouteTableDef()

# Reports opened between two turns of the event loop: about 3.5 ms of HPKE at 55 µs each.
OPEN_SLICE = 64


@routes.post("/collections/{collection_id}/shuffled")
async def post_shuffled(request: web.Request) -> web.Response:
    """A batch ``{"reports": [sealed bytes, ...]}`` from the collection's shuffler, answered report by report."""
    app = request.app
    collection = await get_collection(request)
    shuffle = collection.spec.shuffle
    if shuffle is None:
        raise APIError(409, f"collection {collection.id!r} is not shuffled: devices send it their reports directly")
    token_hash = await app[STORE].get_setting(shuffler_setting(collection.id))
    if token_hash is None:
        raise APIError(403, f"collection {collection.id!r} has no shuffler token")
    require_admin(request, token_hash, app[ADMIN_FAILURES], source(request), who="the collection's shuffler token")
    try:
        obj = unpack(await read_raw(request), app[CONFIG].max_batch)
    except ReportError as exc:
        raise APIError(413 if exc.reason == "batch_too_large" else 400, str(exc), reason=exc.reason) from None
    sealed = obj.get("reports") if isinstance(obj, dict) and len(obj) == 1 else None
    if not isinstance(sealed, list):
        raise APIError(400, "a shuffler's batch is {'reports': [sealed report, ...]} and nothing else", reason="malformed")
    key = await private_key(app[STORE], shuffle.key)
    if key is None:
        raise APIError(503, "this service no longer holds the key the collection's reports are sealed to")
    results: list[dict | None] = [None] * len(sealed)
    opened, positions = [], []
    for position, item in enumerate(sealed):
        if position % OPEN_SLICE == OPEN_SLICE - 1:
            await asyncio.sleep(0)  # a slice opened: let other requests run
        try:
            if not isinstance(item, bytes):
                raise ReportError("sealed", "a sealed report is bytes")
            opened.append(unpack(open_sealed(item, collection.spec, collection.uid, key)))
            positions.append(position)
        except ReportError as exc:
            results[position] = rejected(app[METRICS], collection.id, exc.reason, str(exc))
    for position, result in zip(positions, await ingest_reports(request, collection, opened)):
        results[position] = result
    return await batch_answer(request, results)


@routes.get("/keys")
async def keys(request: web.Request) -> web.Response:
    """The current sealing key's public configuration: what a shuffled collection created now names."""
    return respond(request, (await current_key(request.app[STORE])).to_dict())


@routes.post("/keys")
async def rotate_key(request: web.Request) -> web.Response:
    """A new current sealing key (admin); earlier keys stay, so their collections' reports open."""
    await admin(request)
    return respond(request, (await rotate(request.app[STORE])).to_dict(), status=201)
