"""What a shuffler sends, and the keys devices seal to: the routes of shuffled collections.

``POST /collections/{id}/shuffled`` takes one batch from the collection's shuffler (its token,
never a device): ``{"batch": ID, "size": S, "dummies": M, "padding": P, "view": {"min_batch": K,
"dummies": Mv}, "reports": [sealed, ...]}``. The view is the one the shuffler pinned for the
collection (:class:`~participant.view.ShuffledView`): its floor and dummies may not be below the
spec's, and the batch's may not be below the view's (S − M + P reports at least K, of which P
dummies stand in for people a closing batch lacks; M − P at least Mv), or the whole batch is
refused (409): a shuffler that released less than it promised gets nothing counted. Each report
must carry that view's digest and open with the sealing key the spec names
(:mod:`participant.sealing`); it is then checked, stored and counted as a report sent directly
would be (:func:`~aggregator.service.ingestion.ingest_reports`); the batch's M dummies are counted
once, with its row, in the transaction of its reports. A report that does not open, or is refused,
is *junk*: counted in the batch's size, but nobody's; the batch's junk is noted (status, metrics).
Reports are opened in processes of the service's own (:mod:`.opening`), never on the event loop.
``GET /keys`` publishes the current sealing key; ``POST /keys`` (admin) rotates it.
``GET /limits`` publishes what one request may carry, so that a shuffler sizes its batches to fit.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures.process import BrokenProcessPool

from aiohttp import web

from participant.errors import SpecError
from participant.sealing import sealed_length
from participant.view import ShuffledView
from participant.wire import ReportError, unpack

from ..store.base import ShuffledBatch
from .auth import require_admin
from .errors import APIError
from .ingestion import batch_answer, ingest_reports, rejected
from .plumbing import admin, get_collection, read_raw, respond, source
from .keys import ADMIN_FAILURES, CONFIG, METRICS, OPENER, STORE
from .shuffling import current_key, private_key_bytes, rotate, shuffler_setting

routes = web.RouteTableDef()

# Opened reports unpacked between two turns of the event loop.
UNPACK_SLICE = 512
BATCH_ID = re.compile(r"[0-9a-f]{16,64}")
FIELDS = {"batch", "size", "dummies", "view", "reports"}  # and "padding", a closing batch's


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**40:
        raise APIError(400, f"a shuffler's batch needs {what} as a whole number", reason="malformed")
    return value


def _batch(obj) -> tuple[str, int, int, int, int, int, list]:
    """``(batch id, size, dummies, padding, view floor, view dummies, reports)`` of a shuffler's
    batch; 400 otherwise."""
    if not isinstance(obj, dict) or not FIELDS <= set(obj) <= FIELDS | {"padding"}:
        raise APIError(
            400, "a shuffler's batch is {'batch', 'size', 'dummies', 'view': {'min_batch', 'dummies'}, 'reports'}",
            reason="malformed",
        )  # fmt: skip
    view = obj["view"]
    if not isinstance(view, dict) or set(view) != {"min_batch", "dummies"}:
        raise APIError(400, "a shuffler's batch names its view as {'min_batch', 'dummies'}", reason="malformed")
    if not isinstance(obj["batch"], str) or not BATCH_ID.fullmatch(obj["batch"]):
        raise APIError(400, "a shuffler's batch id is 16 to 64 lower-case hex digits", reason="malformed")
    if not isinstance(obj["reports"], list):
        raise APIError(400, "a shuffler's batch carries its reports as a list", reason="malformed")
    return (
        obj["batch"], _count(obj["size"], "its size"), _count(obj["dummies"], "its dummies"),
        _count(obj.get("padding", 0), "its padding"), _count(view["min_batch"], "its view's min_batch"),
        _count(view["dummies"], "its view's dummies"), obj["reports"],
    )  # fmt: skip


@routes.post("/collections/{collection_id}/shuffled")
async def post_shuffled(request: web.Request) -> web.Response:
    """A batch from the collection's shuffler, answered report by report."""
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
    batch, size, dummies, padding, floor, view_dummies, sealed = _batch(obj)
    try:
        view = ShuffledView(collection.id, collection.uid, collection.spec, floor, view_dummies)
    except SpecError as exc:
        raise APIError(409, f"the shuffler's view of {collection.id!r} is not this collection's: {exc}", reason="view") from None
    if size != len(sealed):
        raise APIError(400, f"a batch said to hold {size} reports holds {len(sealed)}", reason="malformed")
    # A closing batch's padding stands in for people it lacks: dummies, which the bound counts as any report.
    if size - dummies + padding < floor or dummies - padding < view_dummies or padding > dummies:
        raise APIError(
            409,
            f"a batch of {size} reports with {dummies} dummies ({padding} in place of people) is below what the shuffler's "
            f"view promises devices ({floor} reports besides its {view_dummies} dummies at least): nothing counted",
            reason="small_batch",
        )
    key = await private_key_bytes(app[STORE], shuffle.key)
    if key is None:
        raise APIError(503, "this service no longer holds the key the collection's reports are sealed to")
    try:
        packed = await app[OPENER].open(key, view.digest, sealed_length(collection.spec), sealed)
    except BrokenProcessPool:  # a process died (killed): nothing counted, the shuffler sends it again
        app[OPENER].close()
        raise APIError(503, "the service's opening processes failed; retry", {"Retry-After": "1"}) from None
    results: list[dict | None] = [None] * len(sealed)
    opened, positions = [], []
    for position, item in enumerate(packed):
        if position % UNPACK_SLICE == UNPACK_SLICE - 1:
            await asyncio.sleep(0)  # a slice unpacked: let other requests run
        try:
            if isinstance(item, str):
                raise ReportError("sealed", item)
            opened.append(unpack(item))
            positions.append(position)
        except ReportError as exc:
            results[position] = rejected(app[METRICS], collection.id, exc.reason, str(exc))
    # The batch's row goes in the transaction of its reports (their junk added there): never
    # dummies counted without their row, nor a row without its reports (aggregator.store.base).
    noted = ShuffledBatch(collection.id, batch, size, dummies, junk=len(sealed) - len(opened))
    for position, result in zip(positions, await ingest_reports(request, collection, opened, noted)):
        results[position] = result
    if noted.noted:
        app[METRICS].shuffled_batch(collection.id, sum(1 for r in results if r["status"] == "rejected"))
    return await batch_answer(request, results)


@routes.get("/limits")
async def limits(request: web.Request) -> web.Response:
    """What one request may carry here: ``max_body_bytes`` and ``max_batch`` reports."""
    config = request.app[CONFIG]
    return respond(request, {"max_body_bytes": config.max_body_bytes, "max_batch": config.max_batch})


@routes.get("/keys")
async def keys(request: web.Request) -> web.Response:
    """The current sealing key's public configuration: what a shuffled collection created now names."""
    return respond(request, (await current_key(request.app[STORE])).to_dict())


@routes.post("/keys")
async def rotate_key(request: web.Request) -> web.Response:
    """A new current sealing key (admin); earlier keys stay, so their collections' reports open."""
    await admin(request)
    return respond(request, (await rotate(request.app[STORE])).to_dict(), status=201)
