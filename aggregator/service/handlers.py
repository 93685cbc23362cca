"""HTTP handlers of the aggregator service."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import secrets
from collections import Counter
from dataclasses import replace
from pathlib import Path

import msgpack
import numpy as np
from aiohttp import web

from participant.dummies import dummy_variance
from participant.errors import SpecError
from participant.spec import CollectionSpec
from participant.wire import ReportError, check_payload, check_report, decode_values, unpack

from ..estimation.count_noise import cell_variances
from ..estimation.estimators import ESTIMATORS, build_model, strength_refused
from ..estimation.evidence import evidence
from ..estimation.plausibility import plausibility
from ..estimation.smoothing import STRENGTHS
from ..estimation.statistics import CollectionStatistics
from ..store import CONFLICT, NEW, TOKEN_USED, Collection, CollectionExists, IncomingBatch
from ..store.base import COLLECTION_ID, ShuffledBatch
from .addresses import client_address
from .answers import Busy, Cancelled, encode_json, encode_msgpack
from .auth import SETTING_KEY, enrollment_nonce, hash_token, issue_enrollment_tokens, require_admin
from .errors import RETRY_AFTER, APIError
from .flags import REFRESHER
from .keys import ADMIN_FAILURES, ANSWERS, CONFIG, ENROLLMENT_HMAC, FLAGS, LIMITER, METRICS, SPEC_ANSWERS, STORE, WRITER
from .metrics import UNKNOWN_COLLECTION
from .shuffling import (
    key_setting, new_issuing_key, shuffled_guarantees, shuffler_progress, shuffler_setting, stated_privacy, through_shuffler,
)
from .writer import MAX_GROUPS_PER_TRANSACTION

routes = web.RouteTableDef()

MSGPACK = "application/msgpack"
MSGPACK_TYPES = {MSGPACK, "application/x-msgpack", "application/vnd.msgpack"}
DEFAULT_MIN_REPORTS = 100
MAX_MIN_REPORTS = 10**12
MAX_PAGE = 1000
DEFAULT_ESTIMATOR = "normsub"
OPENAPI_PATH = Path(__file__).with_name("openapi.json")


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


def people_of(counted: int, dummies: float) -> int:
    """The people among ``counted`` reports of which ``dummies`` are a shuffler's, in expectation
    (a whole number: every batch's dummies are)."""
    return counted - round(dummies)


async def require_released(request: web.Request, collection: Collection) -> int:
    """The collection's count of reports (a count, not its statistics), or 409 saying how many
    are still missing. A shuffled collection's shufflers' dummy reports are counted as reports
    but not toward ``min_reports``: the people's reports release its estimates."""
    store = request.app[STORE]
    counted = await store.counted(collection)
    people = counted
    if collection.spec.shuffle is not None:
        people = people_of(counted, (await store.dummy_counts()).get(collection.id, 0.0))
    missing = collection.min_reports - people
    if missing > 0:
        raise APIError(
            409,
            f"collection {collection.id!r} has {people} people's reports; estimates are released at "
            f"{collection.min_reports}, so {missing} more are needed",
            reports=people,
            min_reports=collection.min_reports,
            missing=missing,
        )
    return counted


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """200 when the database takes reads and writes; 503 naming the reason otherwise: the
    database is away, read-only, or holding writes (one in flight or refused within the timeout),
    or its check did not answer within the timeout (answered then, the check left to finish)."""
    timeout = request.app[CONFIG].db_timeout
    problem = request.app[WRITER].problem()
    if problem is None:
        check = asyncio.ensure_future(request.app[STORE].health())
        try:
            problem = await asyncio.wait_for(asyncio.shield(check), timeout)
        except TimeoutError:
            check.add_done_callback(lambda done: done.cancelled() or done.exception())
            problem = f"the database did not answer within {timeout:g} s"
    if problem is not None:
        return web.json_response(
            {"status": "unavailable", "reason": problem}, status=503, headers={"Retry-After": RETRY_AFTER}
        )
    return web.json_response({"status": "ok"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """The counters in Prometheus's text format, from the per-collection report counts (one query)
    and the plausibility flags :mod:`~aggregator.service.flags` keeps (never computed here: the
    scrape starts their refresh in the background); the text is rendered off the loop."""
    request.app[REFRESHER].poke(request.app)
    counts = await request.app[STORE].report_counts()
    dummies = await request.app[STORE].dummy_counts()
    people = {cid: people_of(n, dummies.get(cid, 0.0)) for cid, n in counts.items()}
    flags = {cid: flagged for cid, (_, flagged) in request.app[FLAGS].items()}
    body = await off_loop(request.app[METRICS].render, counts, flags, people)
    return web.Response(body=body, content_type="text/plain", charset="utf-8", headers={"X-Format": "prometheus-0.0.4"})


PAGE_PATH = Path(__file__).with_name("page.html")


@routes.get("/")
@routes.get("/collections/{collection_id}/view")
async def page(request: web.Request) -> web.Response:
    """The status page for people: static HTML whose script reads the JSON routes (the admin
    parts with the token the person enters, kept in the tab's session storage)."""
    return web.Response(
        body=PAGE_PATH.read_bytes(),
        content_type="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            "Referrer-Policy": "no-referrer",
        },
    )


FAVICON_PATH = Path(__file__).with_name("favicon.svg")


@routes.get("/favicon.svg")
@routes.get("/favicon.ico")  # asked for by browsers whatever the page says
async def favicon(request: web.Request) -> web.Response:
    return web.Response(
        body=FAVICON_PATH.read_bytes(), content_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"}
    )


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=OPENAPI_PATH.read_bytes(), content_type="application/json")


@routes.post("/collections")
async def create_collection(request: web.Request) -> web.Response:
    await admin(request)
    data = await read_body(request)
    if not isinstance(data, dict) or "spec" not in data:
        raise APIError(400, "send {'spec': {...}, 'min_reports': N, 'id': optional}")
    unknown = set(data) - {"spec", "min_reports", "id", "enrollment", "shuffler"}
    if unknown:
        raise APIError(400, f"unknown fields: {', '.join(sorted(map(str, unknown)))}")
    issuer = None
    if data.get("enrollment") is True and data.get("shuffler") is not None:  # tokens, checked at the shuffler
        issuer = await off_loop(new_issuing_key)
    try:
        spec = CollectionSpec.from_dict(data["spec"])
        if spec.shuffle is not None and spec.shuffle.issuer_key is not None:
            raise SpecError("a spec names no issuing key of its own: the service makes one for a collection with enrollment")
        issuer_key = None if issuer is None else issuer[0]
        spec, shuffler_token = await through_shuffler(request.app[STORE], spec, data.get("shuffler"), issuer_key)
    except SpecError as exc:
        raise APIError(400, f"invalid spec: {exc}") from None
    state = sum(o.state_size for o in spec.oracles)
    max_state = request.app[CONFIG].max_state
    if state > max_state:
        raise APIError(
            413, f"this spec needs {state} statistics entries; this service holds at most {max_state} per collection"
        )
    min_reports = data.get("min_reports", DEFAULT_MIN_REPORTS)
    if isinstance(min_reports, bool) or not isinstance(min_reports, int) or not 0 <= min_reports <= MAX_MIN_REPORTS:
        raise APIError(400, f"min_reports must be an integer from 0 to {MAX_MIN_REPORTS}")
    enrollment = data.get("enrollment", False)
    if not isinstance(enrollment, bool):
        raise APIError(400, "enrollment must be true or false")
    collection_id = data.get("id") or new_collection_id()
    if not isinstance(collection_id, str) or not COLLECTION_ID.fullmatch(collection_id):
        raise APIError(400, "id must be 1-64 letters, digits, '-' or '_'")
    if collection_id.startswith("-"):
        # Existing ids keep working; a new one this way would read as an option on every command line.
        raise APIError(400, "id must not begin with '-': a command line would take '--collection -x' for an option")
    try:
        collection = await request.app[STORE].create_collection(collection_id, spec, min_reports, enrollment)
    except CollectionExists:
        raise APIError(409, f"collection {collection_id!r} exists; specs are immutable") from None
    if shuffler_token is not None:
        await request.app[STORE].set_setting(shuffler_setting(collection.id), hash_token(shuffler_token))
    if issuer is not None:
        await request.app[STORE].set_setting(key_setting(collection.id), issuer[1])
    response = respond(request, collection.to_dict(), status=201)
    response.headers["Location"] = f"/collections/{collection.id}"
    return response


def new_collection_id() -> str:
    """A random collection id of 12 URL-safe characters (72 bits) that does not begin with '-':
    a command line would take ``--collection -x…`` for an option (one id in 64 did)."""
    while (drawn := secrets.token_urlsafe(9)).startswith("-"):
        pass
    return drawn


@routes.get("/collections")
async def list_collections(request: web.Request) -> web.Response:
    """Every collection (admin), in id order: ``?after=ID&limit=N`` pages (N at most 1000)."""
    await admin(request)
    after = request.query.get("after", "")
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        limit = -1
    if not 1 <= limit <= MAX_PAGE:
        raise APIError(400, f"limit must be an integer from 1 to {MAX_PAGE}")
    store = request.app[STORE]
    collections = await store.list_collections(after, limit)
    counts = await store.report_counts()  # one query each, never a collection's statistics
    dummies = await store.dummy_counts()
    items = []
    for collection in collections:
        counted = counts.get(collection.id, 0)
        people = people_of(counted, dummies.get(collection.id, 0.0))
        items.append(
            {
                "id": collection.id,
                "protocol": collection.spec.protocol,
                "model": collection.spec.model,
                "epsilon_per_person": collection.spec.epsilon_per_person,
                "reports": counted,
                "people": people,
                "dummies": counted - people,
                "min_reports": collection.min_reports,
                "released": people >= collection.min_reports,
                "enrollment": collection.enrollment,
                "created_at": collection.created_at,
            }
        )
    page = {"collections": items}
    if len(collections) == limit:
        page["next"] = f"/collections?after={collections[-1].id}&limit={limit}"
    return respond(request, page)


@routes.get("/collections/{collection_id}")
async def get_spec(request: web.Request) -> web.StreamResponse:
    """What a collection publishes: its spec, uid and privacy statement. A collection never
    changes, so its answer is encoded once (off the event loop: a wide spec is megabytes) and
    served with an ``ETag``, its uid; a device that has it is answered 304."""
    collection = await get_collection(request)
    etag = f'"{collection.uid}"'
    if etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers={"ETag": etag})
    as_msgpack = wants_msgpack(request)
    encode = encode_msgpack if as_msgpack else encode_json

    async def produce() -> bytes:
        def answer() -> bytes:
            spec = collection.spec
            shuffled = {"guarantees": shuffled_guarantees(spec)} if spec.shuffle is not None else {}
            return encode({**collection.to_dict(), "privacy": stated_privacy(spec), **shuffled})

        return await off_loop(answer)

    body = await request.app[SPEC_ANSWERS].get((collection.key, as_msgpack), lambda stop: produce())
    return await send_in_slices(request, body, MSGPACK if as_msgpack else "application/json", {"ETag": etag})


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
                f"more than {app[CONFIG].rate_limit} reports per minute from this address; retry in {retry} s",
                headers={"Retry-After": retry},
                reason="rate_limited",
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
    ``shuffled``: the shuffler's batch the reports are (its ``junk`` those that did not open): each
    valid report is counted as ``dummies / valid`` of its dummies (see :class:`IncomingBatch`), the
    batch's refused reports are added to its junk, and its reports go to the writer as one request,
    never in parts, so that they, their dummies and the batch's row are one transaction (or, none
    valid, the row alone is written); ``shuffled.noted`` then says whether the row is new.
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
        share = shuffled.dummies / sum(map(len, batches))
        shares = (lambda batch: {"dummy_shares": np.full(len(batch), share)}) if shuffled.dummies else (lambda _: {})
        parts = [[replace(batch, shuffled=shuffled, **shares(batch)) for batch in batches]]
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


@routes.post("/collections/{collection_id}/enrollments")
async def enrollments(request: web.Request) -> web.Response:
    """Issue single-use enrollment tokens (admin): ``{"count": N}`` gives N tokens to hand out."""
    await admin(request)
    collection = await get_collection(request)
    if not collection.enrollment:
        raise APIError(409, f"collection {collection.id!r} was created without enrollment; it takes no tokens")
    data = await read_body(request)
    count = data.get("count") if isinstance(data, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000:
        raise APIError(400, "send {'count': N} with 1 <= N <= 10000")
    tokens = issue_enrollment_tokens(request.app[ENROLLMENT_HMAC], collection.id, count)
    return respond(request, {"collection": collection.id, "tokens": tokens}, status=201)


@routes.get("/collections/{collection_id}/status")
async def status(request: web.Request) -> web.Response:
    """Progress of a collection (admin): reports counted, of them people's and a shuffler's dummies
    (in expectation, as the statistics take them out), reports per input, release state (people
    against ``min_reports``), plausibility flags."""
    await admin(request)
    collection = await get_collection(request)
    stats = await request.app[STORE].statistics(collection)
    try:
        checks = await off_loop(plausibility, stats)
    except (ArithmeticError, ValueError):
        checks = {"flagged": False, "inputs": []}
    request.app[FLAGS][collection.id] = (stats.n_reports, bool(checks["flagged"]))
    people = people_of(stats.n_reports, stats.dummies)
    return respond(
        request,
        {
            "collection": collection.id,
            "reports": stats.n_reports,
            "people": people,
            "dummies": stats.n_reports - people,
            "min_reports": collection.min_reports,
            "released": people >= collection.min_reports,
            "epsilon_per_person": collection.spec.epsilon_per_person,
            "inputs": [{"name": name, "reports": int(s.n)} for name, s in zip(collection.spec.input_names, stats.states)],
            "flagged": bool(checks["flagged"]),
            "plausibility": checks,
            **(await _shuffled_status(request, collection) if collection.spec.shuffle else {}),
        },
    )


async def _shuffled_status(request: web.Request, collection: Collection) -> dict:
    """A shuffled collection's part of its status: what its shuffler says of it, and the batches
    taken here (their reports, dummies and junk, and the fewest other reports than dummies in one)."""
    return {
        "shuffler": await shuffler_progress(collection),
        "batches": await request.app[STORE].batch_totals(collection),
    }


@routes.get("/collections/{collection_id}/plausibility")
async def plausibility_check(request: web.Request) -> web.Response:
    """Poisoning checks on the collection's running statistics (admin: they describe every report)."""
    await admin(request)
    collection = await get_collection(request)
    stats = await request.app[STORE].statistics(collection)
    checks = await off_loop(plausibility, stats)
    request.app[FLAGS][collection.id] = (stats.n_reports, bool(checks["flagged"]))
    return respond(request, {"collection": collection.id, **checks})


def _estimator(request: web.Request) -> str:
    name = request.query.get("estimator", DEFAULT_ESTIMATOR)
    if name not in ESTIMATORS:
        raise APIError(400, f"unknown estimator {name!r}; choose one of {', '.join(ESTIMATORS)}")
    return name


def _strength(request: web.Request, collection: Collection, estimator: str) -> float | None:
    """The ``strength`` the client asked the model to be smoothed at (None: the default, 1).
    Only the listed strengths (:data:`~aggregator.estimation.smoothing.STRENGTHS`):
    every other number would be one more model to build and cache per release state, which anyone
    could ask for."""
    raw = request.query.get("strength")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if value not in STRENGTHS:
        raise APIError(400, f"strength must be one of {', '.join(f'{s:g}' for s in STRENGTHS)}, not {raw!r}")
    if refused := strength_refused(collection.spec, estimator):
        raise APIError(400, f"strength {raw!r}: {refused}")
    return value


def _estimates(collection: Collection, stats: CollectionStatistics) -> dict:
    """Every input's estimates from the people's reports (a shuffler's dummies taken out in
    expectation), and their variance: the people's noise and what the dummies add."""
    spec = collection.spec
    people = stats.people()
    added = dummy_variance(spec, stats.dummies) if stats.dummies else [0.0] * spec.n_inputs
    inputs = []
    rows = zip(spec.input_names, spec.oracles, people.states, people.estimated_counts(), added)
    for i, (name, oracle, state, estimate, extra) in enumerate(rows):
        if spec.model == "discrete":
            variance = cell_variances(oracle, state.n, estimate) + extra
        elif i == 0:
            variance = oracle.variance(state.n) + extra
        else:  # a mean: the dummies' variance is of the summed support
            variance = oracle.variance(state.n) + extra / max(state.n, 1) ** 2
        inputs.append({"name": name, "reports": state.n, "size": oracle.state_size, "estimate": estimate, "variance": variance})
    return {
        "collection": collection.id,
        "reports": stats.n_reports,
        "dummies": stats.dummies,
        "layout": "input 0 is the class (index c); for a discrete model input i > 0 is feature i-1 jointly "
        "with the class (index a*k + c); for a gaussian model the estimate is the mean class-hiding vector",
        "inputs": inputs,
    }


def _model(collection: Collection, stats: CollectionStatistics, estimator: str, strength: float | None) -> dict:
    answer = {
        "collection": collection.id,
        "estimator": estimator,
        "reports": stats.n_reports,
        **build_model(stats, estimator, strength=strength).to_dict(),
    }
    answer["evidence"] = stats.derived("evidence", evidence)
    return answer


async def cached_answer(request: web.Request, collection: Collection, build, *extra) -> web.Response:
    """``build(collection, statistics, *extra)`` encoded as the client asked (JSON or msgpack),
    from the app's :class:`~aggregator.service.answers.AnswerCache`: one build per release state (the
    count of reports says which), encoded in slices on a worker thread, from statistics read
    once per release state whatever the answer."""
    counted = await require_released(request, collection)
    as_msgpack = any(t in request.headers.get("Accept", "") for t in MSGPACK_TYPES)
    encode = encode_msgpack if as_msgpack else encode_json
    store = request.app[STORE]

    answers = request.app[ANSWERS]
    built = (build.__name__, collection.key, counted, *extra)
    gzipped = accepts_gzip(request)

    async def produce(stop) -> bytes:
        stats = await answers.statistics_of((collection.key, counted), lambda: store.statistics(collection))
        # Built once for both formats (and the statistics' evidence once for every answer).
        data = await answers.shared(built, lambda: off_loop(build, collection, stats, *extra))
        body = await off_loop(encode, data, stop)
        return await off_loop(lambda: gzip.compress(body, GZIP_LEVEL, mtime=0)) if gzipped else body

    def gone() -> bool:
        return request.transport is None or request.transport.is_closing()

    try:
        body = await answers.get((*built, as_msgpack, gzipped), produce, gone)
    except Busy as exc:
        raise APIError(503, str(exc), {"Retry-After": "2"}) from None
    except Cancelled:
        raise APIError(499, "the client left before its answer was built") from None
    encoded = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"} if gzipped else {"Vary": "Accept-Encoding"}
    return await send_in_slices(request, body, MSGPACK if as_msgpack else "application/json", encoded)


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


@routes.get("/collections/{collection_id}/estimates")
async def estimates(request: web.Request) -> web.Response:
    collection = await get_collection(request)
    return await cached_answer(request, collection, _estimates)


@routes.get("/collections/{collection_id}/model")
async def model(request: web.Request) -> web.Response:
    collection = await get_collection(request)
    estimator = _estimator(request)
    return await cached_answer(request, collection, _model, estimator, _strength(request, collection, estimator))
