"""Reports in: single reports and batches posted to a collection, checked and handed to the writer."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from dataclasses import replace

import msgpack
import numpy as np
from aiohttp import web

from participant.wire import ReportError, check_payload, check_report, decode_values, unpack

from ..store import CONFLICT, NEW, TOKEN_USED, Collection, IncomingBatch
from ..store.base import ShuffledBatch
from .auth import enrollment_nonce
from .errors import APIError
from .keys import CONFIG, ENROLLMENT_HMAC, LIMITER, METRICS, STORE, WRITER
from .metrics import UNKNOWN_COLLECTION
from .plumbing import (
    MSGPACK,
    MSGPACK_TYPES,
    collection_id_of,
    read_raw,
    respond,
    respond_outcome,
    source,
    wants_msgpack,
)
from .writer import MAX_GROUPS_PER_TRANSACTION

routes = web.RouteTableDef()


REPORTS_PATH = "/collections/{collection_id}/reports"


@routes.post(REPORTS_PATH)
async def post_reports(request: web.Request) -> web.Response:
    """One report (a map), or a batch ``{"reports": [...]}`` answered report by report."""
    app = request.app
    collection_id = collection_id_of(request)
    collection = await app[STORE].collection(collection_id)
    if collection is None:
        app[METRICS].reject(UNKNOWN_COLLECTION, "unknown_collection")
        raise APIError(404, f"no collection {collection_id!r}")
    metrics = app[METRICS]
    if collection.spec.shuffle is not None:
        metrics.reject(collection.id, "not_through_shuffler")
        raise APIError(
            409,
            f"collection {collection.id!r} takes reports only through its shuffler at {collection.spec.shuffle.url}",
            reason="not_through_shuffler",
        )
    if request.content_type not in MSGPACK_TYPES:
        metrics.reject(collection.id, "wrong_content_type")
        raise APIError(415, f"reports are sent as {MSGPACK}")
    try:
        body = await read_raw(request)
    except web.HTTPRequestEntityTooLarge:
        metrics.reject(collection.id, "too_large")
        raise
    try:
        obj = unpack(body, app[CONFIG].max_batch)
    except ReportError as exc:
        metrics.reject(collection.id, exc.reason)
        raise APIError(413 if exc.reason == "batch_too_large" else 400, str(exc), reason=exc.reason) from None
    if LIMITER in app:
        count = len(obj["reports"]) if isinstance(obj, dict) and isinstance(obj.get("reports"), list) else 1
        wait = app[LIMITER].take(collection.id, source(request), count)
        if wait:
            metrics.reject(collection.id, "rate_limited", count)
            retry = "3600" if math.isinf(wait) else str(math.ceil(wait))
            raise APIError(
                429,
                f"more than {app[CONFIG].rate_limit} reports per minute from this address; retry in {retry} s; "
                "its operator can raise python -m aggregator serve --rate-limit",
                headers={"Retry-After": retry},
                reason="rate_limited",
                option="--rate-limit",
            )

    if isinstance(obj, dict) and "reports" in obj:
        return await _post_batch(request, collection, obj)
    outcome = await _ingest_one(request, collection, obj)
    if outcome["status"] == "rejected":
        status = {"bad_token": 403, "token_used": 409, "conflict": 409, "wrong_spec": 409}.get(outcome["reason"], 400)
        raise APIError(status, outcome["error"], reason=outcome["reason"])
    return respond_outcome(request, outcome["status"])


async def _post_batch(request: web.Request, collection: Collection, obj: dict) -> web.Response:
    metrics = request.app[METRICS]
    reports = obj["reports"]
    if len(obj) != 1 or not isinstance(reports, list):
        metrics.reject(collection.id, "malformed")
        raise APIError(400, "a batch is {'reports': [report, ...]} and nothing else", reason="malformed")
    limit = request.app[CONFIG].max_batch
    if len(reports) > limit:
        metrics.reject(collection.id, "batch_too_large")  # one refused request, whatever its size
        raise APIError(413, f"a batch holds at most {limit} reports, got {len(reports)}", reason="batch_too_large")
    return await batch_answer(request, await ingest_reports(request, collection, reports))


async def batch_answer(request: web.Request, results: list[dict]) -> web.Response:
    """The answer to a batch: the counts of each outcome and every report's result, in order."""
    counts = Counter(r["status"] for r in results)
    summary = {
        "accepted": counts["accepted"],
        "duplicate": counts["duplicate"],
        "rejected": counts["rejected"],
        "results": results,
    }
    if len(results) <= CHECK_SLICE:
        return respond(request, summary)
    as_msgpack = wants_msgpack(request)
    body = await _encoded_in_slices(summary, as_msgpack)
    if as_msgpack:
        return web.Response(body=body, content_type=MSGPACK)
    return web.Response(body=body, content_type="application/json", charset="utf-8")


async def _encoded_in_slices(summary: dict, as_msgpack: bool) -> bytes:
    """A batch's summary encoded on the event loop a slice of results at a time (ten thousand
    results are tens of milliseconds; on a worker thread the loop would wait its turn for the GIL
    at every read and write), each distinct result object encoded once."""
    results = summary["results"]
    encoded: dict[int, bytes] = {}  # id(result): its encoding; outcomes share result objects
    if as_msgpack:
        packer = msgpack.Packer()
        parts = [packer.pack_map_header(len(summary))]
        for key, value in summary.items():
            parts.append(packer.pack(key))
            if key != "results":
                parts.append(packer.pack(value))
        parts.append(packer.pack_array_header(len(results)))
        encode, separator = packer.pack, b""
    else:
        head = {key: value for key, value in summary.items() if key != "results"}
        parts = [json.dumps(head)[:-1].encode() + b', "results": [']
        encode, separator = (lambda result: json.dumps(result).encode()), b", "
    items = []
    for start in range(0, len(results), CHECK_SLICE):
        for result in results[start : start + CHECK_SLICE]:
            done = encoded.get(id(result))
            if done is None:
                done = encoded[id(result)] = encode(result)
            items.append(done)
        await asyncio.sleep(0)
    parts.append(separator.join(items))
    if not as_msgpack:
        parts.append(b"]}")
    return b"".join(parts)


def _enrolled(collection: Collection) -> bool:
    """Whether each report carries an enrollment token checked here: a collection created with
    enrollment, unless it is shuffled (its anonymous tokens stop at its shuffler, :mod:`.issuance`)."""
    return collection.enrollment and collection.spec.shuffle is None


def _checked(key: bytes, collection: Collection, obj) -> tuple[bytes, int, object, bytes | None]:
    """``(report id, input, wire value, token nonce)`` of one report; raises ReportError. A
    collection with enrollment requires a token this service issued for it (``key``: the
    enrollment HMAC key)."""
    report_id, input_index, value = check_report(collection.spec, obj)
    if not _enrolled(collection):
        return report_id, input_index, value, None
    nonce = enrollment_nonce(key, collection.id, obj.get("token"))
    if nonce is None:
        raise ReportError("bad_token", "this collection needs the enrollment token you were given (missing or invalid)")
    return report_id, input_index, value, nonce


def _record(metrics, collection_id: str, outcome: int) -> dict:
    if outcome == NEW:
        metrics.accept(collection_id)
        return {"status": "accepted"}
    if outcome == TOKEN_USED:
        return rejected(metrics, collection_id, "token_used", "this enrollment token has already carried a report")
    if outcome == CONFLICT:
        return rejected(
            metrics,
            collection_id,
            "conflict",
            "a report with this id was stored with another input or value; the first one is kept",
        )
    metrics.duplicated(collection_id)
    return {"status": "duplicate"}


# Reports checked, or their outcomes recorded, between two turns of the event loop (a worker
# thread would be worse: the loop's thread then waits its turn for the GIL behind every worker);
# and reports in one of a large request's transactions.
CHECK_SLICE = 128
SUBMIT_PART = 500


async def _sorted_reports(key: bytes, collection: Collection, reports: list):
    """Every report checked, a slice at a time, and the valid ones decoded per input
    (vectorised): the rejections ``[(position, reason, message)]``, and the batches to store with
    each one's positions."""
    spec = collection.spec
    rejections: list[tuple[int, str, str]] = []
    groups: dict[int, tuple[list[int], list[bytes], list, list]] = {}
    for position, item in enumerate(reports):
        if position % CHECK_SLICE == CHECK_SLICE - 1:
            await asyncio.sleep(0)  # a slice of reports checked: let other requests run
        try:
            report_id, input_index, value, nonce = _checked(key, collection, item)
        except ReportError as exc:
            rejections.append((position, exc.reason, str(exc)))
            continue
        positions, ids, values, nonces = groups.setdefault(input_index, ([], [], [], []))
        positions.append(position)
        ids.append(report_id)
        values.append(value)
        nonces.append(nonce)
    batches, batch_positions = [], []
    for n, (input_index, (positions, ids, values, nonces)) in enumerate(groups.items()):
        if n % CHECK_SLICE == CHECK_SLICE - 1:
            await asyncio.sleep(0)  # a slice of inputs decoded: let other requests run
        rows, bad, message = decode_values(spec.oracles[input_index], values, input_index)
        if bad.any():
            rejections += [(positions[j], "out_of_range", message) for j in np.flatnonzero(bad)]
            keep = np.flatnonzero(~bad).tolist()
            positions, ids, values, nonces, rows = (
                [positions[j] for j in keep], [ids[j] for j in keep], [values[j] for j in keep],
                [nonces[j] for j in keep], rows[keep],
            )  # fmt: skip
        if positions:
            batches.append(
                IncomingBatch(collection.id, input_index, ids, values, rows, nonces if _enrolled(collection) else None)
            )
            batch_positions.append(positions)
    return rejections, batches, batch_positions


async def ingest_reports(
    request: web.Request, collection: Collection, reports: list, shuffled: ShuffledBatch | None = None
) -> list[dict]:
    """Validate, store and count ``reports``; returns one result per report, in order.

    Per-report checks run first, a slice at a time; payloads are then decoded together per input
    (vectorised); every valid report goes to the writer, a large request's in several parts.
    ``shuffled``: the shuffler's batch the reports are (its ``junk`` those that did not open): the
    batch's refused reports are added to its junk, and its reports go to the writer as one request,
    never in parts, so that they, the batch's row and, with the row, its dummies (once per batch
    id, :meth:`~aggregator.store.base.Store.ingest`) are one transaction (or, none valid, the row
    alone is written, and no dummies: none of its reports is counted); ``shuffled.noted`` then
    says whether the row is new.
    """
    metrics, key = request.app[METRICS], request.app[ENROLLMENT_HMAC]
    results: list[dict] = [{"status": "accepted"}] * len(reports)
    rejections, batches, batch_positions = await _sorted_reports(key, collection, reports)
    for n, (position, reason, message) in enumerate(rejections):
        results[position] = rejected(metrics, collection.id, reason, message)
        if n % CHECK_SLICE == CHECK_SLICE - 1:
            await asyncio.sleep(0)
    if shuffled is not None:
        shuffled.junk += len(rejections)
        if not batches:
            shuffled.noted = await request.app[STORE].record_batch(
                collection, shuffled.batch, shuffled.size, shuffled.dummies, shuffled.junk
            )
    if not batches:
        return results
    parts = _parts(batches)
    if shuffled is not None:
        parts = [[replace(batch, shuffled=shuffled) for batch in batches]]
    outcomes = [o for part in await asyncio.gather(*map(request.app[WRITER].submit, parts)) for o in part]
    recorded = 0
    for positions, batch_outcomes in zip(batch_positions, outcomes):
        for position, outcome in zip(positions, batch_outcomes):
            results[position] = _record(metrics, collection.id, outcome)
        recorded += len(positions)
        if recorded >= CHECK_SLICE:  # a slice of outcomes recorded: let other requests run
            recorded = 0
            await asyncio.sleep(0)
    return results


def _parts(batches: list[IncomingBatch]) -> list[list[IncomingBatch]]:
    """``batches`` in consecutive parts of about :data:`SUBMIT_PART` reports and at most
    :data:`~aggregator.service.writer.MAX_GROUPS_PER_TRANSACTION` inputs, so that a large request
    goes to the database in several transactions, each holding the loop briefly (its work grows
    with the inputs it touches as much as with its reports: 10,000 reports into 55,001 inputs are
    10,000 groups); each report's outcome is its own whatever the part."""
    parts, size = [[]], 0
    for batch in batches:
        if size >= SUBMIT_PART or len(parts[-1]) >= MAX_GROUPS_PER_TRANSACTION:
            parts.append([])
            size = 0
        parts[-1].append(batch)
        size += len(batch)
    return parts


async def _ingest_one(request: web.Request, collection: Collection, obj) -> dict:
    """:func:`_ingest` for a single report, without the grouping a batch needs."""
    metrics = request.app[METRICS]
    try:
        report_id, input_index, value, nonce = _checked(request.app[ENROLLMENT_HMAC], collection, obj)
        check_payload(collection.spec.oracles[input_index], value, input_index)
    except ReportError as exc:
        return rejected(metrics, collection.id, exc.reason, str(exc))
    tokens = [nonce] if collection.enrollment else None
    # The row is decoded by the store, with every other report of this input in the commit.
    batch = IncomingBatch(collection.id, input_index, [report_id], [value], None, tokens)
    (outcomes,) = await request.app[WRITER].submit([batch])
    return _record(metrics, collection.id, int(outcomes[0]))


def rejected(metrics, collection_id: str, reason: str, message: str) -> dict:
    metrics.reject(collection_id, reason)
    return {"status": "rejected", "reason": reason, "error": message}
