"""Collections: created, listed, their spec, enrollment codes, status and plausibility."""

from __future__ import annotations

import secrets

from aiohttp import web

from participant.errors import SpecError
from participant.spec import CollectionSpec

from ..estimation.plausibility import plausibility
from ..store import Collection, CollectionExists
from ..store.base import COLLECTION_ID
from .answers import encode_json, encode_msgpack
from .auth import hash_token, issue_enrollment_tokens
from .errors import APIError
from .keys import CONFIG, ENROLLMENT_HMAC, FLAGS, SPEC_ANSWERS, STORE
from .plumbing import MSGPACK, admin, get_collection, off_loop, read_body, respond, send_in_slices, wants_msgpack
from .shuffling import (
    key_setting,
    new_issuing_key,
    shuffled_guarantees,
    shuffler_progress,
    shuffler_setting,
    stated_privacy,
    through_shuffler,
)

routes = web.RouteTableDef()
DEFAULT_MIN_REPORTS = 100
MAX_MIN_REPORTS = 10**12
MAX_PAGE = 1000


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
