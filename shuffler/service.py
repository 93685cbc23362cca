"""The shuffler's HTTP service: what devices and anyone may ask of it.

What it shows anyone, now or later (its answers and their timing, every count, its files), is the
same whether a report was a person's or a dummy, and carries nothing of arrival order beyond the
release schedule, which is public anyway (docs/trust.md).

- ``GET /collections/{id}/view``: the collection's view (:class:`~participant.view.ShuffledView`,
  pinned now if it has none, :mod:`.views`): what a device reports under.
- ``GET /views``: every pinned view's id, digest, floor and dummies, so that anyone can check
  that every device was shown the same.
- ``POST /collections/{id}/reports``: one sealed report (``application/ldpnb-sealed``), or a
  batch of them (msgpack ``{"reports": [bytes, ...]}``, at most ``--max-post``); each is refused
  unless it has the collection's one sealed length and carries its view's digest, then stored,
  then acknowledged: ``accepted``, or ``duplicate`` for bytes that wait already or were released
  (a person's retry, or anyone re-posting a forwarded report: a dummy's re-post hears the same).
  Reports arriving together are stored in one commit. Within the limits of :mod:`.limits` (429
  with ``Retry-After``); a body is read against its limit, its time and the bytes read at once as
  it arrives.
- ``GET /collections/{id}``: the floor and dummies batches are held to, how many people's reports
  were forwarded, whether it is closed, and why its last forward failed. Nothing of the reports
  waiting: any count of them, however coarse, moves when one person's report arrives, and
  anyone who can post can steer it to an edge first.
- ``POST /collections/{id}/close`` (the token the shuffler presents to the aggregator): release
  what waits now and take no more reports (410); ``{"pad": true}`` pads a last batch short of the
  floor with dummies (:meth:`~shuffler.release.Releaser.close`), else fewer than a batch keep
  waiting for a close with pad.
- ``GET /healthz``: whether the store answers.
- ``GET /status`` (the operator token of ``serve --operator-token-file``, which the aggregator
  never holds): what waits, exactly, per collection (:meth:`~shuffler.store.Store.operator_rows`):
  the shuffler's operator's own view; without that token, 403.

A web page the operator names (``--allow-origin``) may read views and post reports from a
browser; nothing else carries CORS headers. Connections are capped per network and in all, and
one that sends no complete request, or no whole body, in time is closed
(:mod:`participant.serving`, as the aggregator's).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from dataclasses import dataclass

import aiohttp
import msgpack
from aiohttp import web

from participant.addresses import client_address
from participant.reasons import failure_reason
from participant import tokens
from participant.sealing import sealed_length
from participant.view import DIGEST_BYTES, ShuffledView

from .limits import Limits
from .problems import Problem
from .release import Releaser
from .store import Store, StoreUnavailable
from .views import Views

log = logging.getLogger("shuffler")
SEALED = "application/ldpnb-sealed"
MSGPACK = "application/msgpack"


@dataclass
class Settings:
    """What the shuffler's operator decides: the ``aggregator`` it forwards to and the ``token`` it
    presents there; its own batch floor (``min_batch``) and ``dummies`` per batch (None: as many as
    the floor, :func:`~shuffler.views.least_dummies`), applied over every view's at every release;
    the release ``interval`` in seconds; the web pages whose browsers may read views and post
    reports (``allowed_origins``); its limits: reports a minute from one address
    (``per_address``), reports a second to one collection (``per_collection``), reports waiting
    per collection (``max_waiting``), reports in one posted batch (``max_post``) and bytes of
    bodies read at once (``max_reading``), 0 being no rate limit; the days a release's digests
    are remembered (``forget_after``); its connections: open at once (``max_connections``),
    from one network (``max_connections_per_address``), seconds to send a whole request head
    (``keepalive_timeout``) and a whole body (``body_timeout``); the token of its own operator
    (``operator_token``: ``GET /status``), None for no operator status; and the reverse proxies
    whose ``X-Forwarded-For`` names the device a request is counted against
    (``trusted_proxies``, networks of :func:`participant.addresses.parse_networks`)."""

    aggregator: str
    token: str
    min_batch: int = 100
    interval: float = 5.0
    allowed_origins: tuple = ()
    dummies: int | None = None
    per_address: int = 600
    per_collection: float = 20_000
    max_waiting: int = 1_000_000
    max_post: int = 1000
    max_reading: int = 64 * 1024 * 1024
    forget_after: int = 365
    max_connections: int = 1024
    max_connections_per_address: int = 256
    keepalive_timeout: float = 15.0
    body_timeout: float = 30.0
    operator_token: str | None = None
    trusted_proxies: tuple = ()


class Shuffler:
    """The running shuffler: its settings, its store, its views and release rounds, its limits,
    and the reports waiting to be committed together."""

    def __init__(self, settings: Settings, store: Store):
        self.settings, self.store = settings, store
        self.views = Views(store, settings)
        self.releaser = Releaser(store, self.views, settings)
        self.limits = Limits(settings)
        self.queue: list = []
        # Reports waiting per collection, read from the store once and kept as they come (a
        # release forgets the count): the limits check it at every post.
        self.waiting: dict[str, int] = {}
        self.releaser.on_release = lambda collection_id: self.waiting.pop(collection_id, None)
        self._committing: asyncio.Task | None = None

    async def receive(self, view: ShuffledView, sealed: list) -> list[str]:
        """Store reports of a collection (committed with whatever else arrived meanwhile): each
        item of ``sealed`` a sealed report (:func:`admissible`'s bytes) or None for one refused;
        each one's outcome: ``accepted``, ``duplicate``, ``rejected`` or ``closed`` (the collection
        closed before they were stored, here or at another instance)."""
        outcomes = [None] * len(sealed)
        fresh = []
        for i, item in enumerate(sealed):
            if isinstance(item, bytes):
                fresh.append(i)
            else:
                outcomes[i] = "rejected"
        if fresh:
            done = asyncio.get_running_loop().create_future()
            self.queue.append(([(view.collection, sealed[i]) for i in fresh], done))
            if self._committing is None or self._committing.done():
                self._committing = asyncio.ensure_future(self._commit())
            for i, new in zip(fresh, await done):
                outcomes[i] = "closed" if new is None else "accepted" if new else "duplicate"
            if view.collection in self.waiting:
                self.waiting[view.collection] += sum(1 for o in outcomes if o == "accepted")
        return outcomes

    async def _commit(self) -> None:
        """Commit every queued report in one transaction, until the queue is empty."""
        while self.queue:
            queued, self.queue = self.queue, []
            items = [item for reports, _ in queued for item in reports]
            try:
                outcomes = await self.store.add(items)
            except Exception as exc:  # noqa: BLE001 (every waiting request hears of it: none is acknowledged,
                # and a re-send of the same bytes is a duplicate if the commit landed after all)
                log.error("the store refused a commit: %s", exc)
                for _, done in queued:
                    done.set_exception(Problem(503, f"the shuffler's store failed: {failure_reason(exc)}; retry", 1.0))
                continue
            at = 0
            for reports, done in queued:
                done.set_result(outcomes[at : at + len(reports)])
                at += len(reports)

    async def waiting_now(self, collection_id: str) -> int:
        """Reports of the collection waiting for a batch."""
        count = self.waiting.get(collection_id)
        if count is None:
            try:
                count = self.waiting[collection_id] = await self.store.waiting(collection_id)
            except StoreUnavailable as exc:
                raise Problem(503, f"{exc}; retry", 1.0) from None
        return count


SHUFFLER = web.AppKey("shuffler", Shuffler)


def _json(status: int, data: dict, origin: str | None = None, retry_after: float | None = None) -> web.Response:
    response = web.json_response(data, status=status)
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = "Retry-After"  # a page's participant waits what it asks
        response.headers["Vary"] = "Origin"
    if retry_after is not None:
        response.headers["Retry-After"] = str(int(retry_after))
    return response


def _origin(request: web.Request) -> str | None:
    """The page's origin when it may call here; raises Problem (403) for one that may not."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.lower() not in request.app[SHUFFLER].settings.allowed_origins:
        raise Problem(403, f"requests from the web page at {origin[:100]} are not allowed (--allow-origin)")
    return origin


# The answers to nearly every request, encoded once.
_OUTCOMES = {outcome: json.dumps({"status": outcome}).encode() for outcome in ("accepted", "duplicate")}


def _outcome(outcome: str, origin: str | None) -> web.Response:
    """``{"status": outcome}``: 201 for a new report, 200 for one received before."""
    response = web.Response(
        body=_OUTCOMES[outcome], status=201 if outcome == "accepted" else 200, content_type="application/json"
    )
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    return response


def _problem(problem: Problem, origin: str | None = None) -> web.Response:
    body = {"error": str(problem)}
    body.update((key, value) for key, value in (("reason", problem.reason), ("option", problem.option)) if value is not None)
    return _json(problem.status, body, origin, problem.retry_after)


async def _body(request: web.Request, limit: int) -> bytes:
    """The request's body, read as it arrives: refused (413) as soon as it passes ``limit`` bytes
    (at once when it declares more), (408) when it has not all arrived within the body timeout,
    and (503) when its bytes would pass what the shuffler reads at once. Bytes are counted as they
    arrive, not as declared: a body dripped a byte a second holds what it sent, not what it says."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise Problem(413, f"a body of {declared} bytes; this takes at most {limit}")
    shuffler = request.app[SHUFFLER]
    chunks, size = [], 0
    try:
        async with asyncio.timeout(shuffler.settings.body_timeout):
            async for chunk in request.content.iter_chunked(64 * 1024):
                if size + len(chunk) > limit:
                    raise Problem(413, f"a body of more than {limit} bytes; this takes at most {limit}")
                shuffler.limits.reserve(len(chunk))
                size += len(chunk)
                chunks.append(chunk)
    except TimeoutError:
        raise Problem(408, f"the request body did not arrive within {shuffler.settings.body_timeout:g} s") from None
    finally:
        shuffler.limits.release(size)
    return b"".join(chunks)


async def preflight(request: web.Request) -> web.StreamResponse:
    try:
        origin = _origin(request)
    except Problem as problem:
        return _problem(problem)
    answer = web.Response(status=204, headers={"Access-Control-Allow-Methods": "GET, POST", "Access-Control-Allow-Headers": "Content-Type, Accept"})
    answer.headers["Access-Control-Allow-Origin"] = origin or ""
    answer.headers["Vary"] = "Origin"
    return answer


def posted_length(view: ShuffledView) -> int:
    """Bytes of one report posted for ``view``: the sealed report and, where its collection takes
    reports only from enrolled people, the anonymous token behind it."""
    length = sealed_length(view.spec)
    return length + tokens.token_length(view) if view.spec.shuffle.issuer_key is not None else length


def admissible(view: ShuffledView, item) -> bytes | str:
    """The sealed report ``item`` carries when it may be stored (the view's one length and digest
    and, where the collection takes tokens, a token issued for this very report:
    :func:`participant.tokens.check`), else why not, in one line. The token stops here."""
    length = sealed_length(view.spec)
    if not isinstance(item, bytes) or len(item) != posted_length(view) or item[:DIGEST_BYTES] != view.digest:
        if view.spec.shuffle.issuer_key is not None and isinstance(item, bytes) and len(item) == length:
            return "this collection takes reports only with the anonymous token its enrolled people obtain: none came"
        return "not a sealed report of this collection's view (another length, or another view's digest)"
    if view.spec.shuffle.issuer_key is None:
        return item
    try:
        tokens.check(view, item[:length], item[length:])
    except tokens.TokenError as exc:
        return f"the report's token is refused: {exc}"
    return item[:length]


async def admitted(view: ShuffledView, items: list) -> list[bytes | str]:
    """:func:`admissible` of each item, off the event loop when tokens are checked for many."""
    if view.spec.shuffle.issuer_key is not None and len(items) > 16:
        return await asyncio.to_thread(lambda: [admissible(view, item) for item in items])
    return [admissible(view, item) for item in items]


async def post_reports(request: web.Request) -> web.StreamResponse:
    shuffler = request.app[SHUFFLER]
    origin = None
    try:
        origin = _origin(request)
        view = await shuffler.views.get(request.match_info["collection_id"])
        if view.collection in shuffler.releaser.closed:
            raise Problem(410, f"collection {view.collection!r} is closed: it takes no more reports")
        length = posted_length(view)
        address = client_address(request, shuffler.settings.trusted_proxies)
        if request.content_type == SEALED:
            # Refused before the limits look at what waits: a report that could never be stored
            # learns nothing of them.
            sealed = (await admitted(view, [await _body(request, length)]))[0]
            if isinstance(sealed, str):
                raise Problem(400, sealed)
            shuffler.limits.admit(address, view.collection, 1, 1, await shuffler.waiting_now(view.collection))
            outcome = (await shuffler.receive(view, [sealed]))[0]
            if outcome == "closed":
                raise Problem(410, f"collection {view.collection!r} is closed: it takes no more reports")
            return _outcome(outcome, origin)
        if request.content_type == MSGPACK:
            most = shuffler.settings.max_post
            body = await _body(request, most * (length + 5) + 64)
            try:
                data = msgpack.unpackb(body, max_array_len=most, max_map_len=1, max_str_len=16, max_bin_len=length)
            except Exception:  # noqa: BLE001 (msgpack's several errors for bad input)
                raise Problem(400, f"a batch is msgpack {{'reports': [sealed, ...]}} of at most {most}") from None
            if not isinstance(data, dict) or not isinstance(data.get("reports"), list):
                raise Problem(400, "a batch is msgpack {'reports': [sealed, ...]}")
            reports = await admitted(view, data["reports"])
            valid = sum(isinstance(item, bytes) for item in reports)
            waiting = await shuffler.waiting_now(view.collection) if valid else 0
            shuffler.limits.admit(address, view.collection, len(reports), valid, waiting)
            outcomes = await shuffler.receive(view, [item if isinstance(item, bytes) else None for item in reports])
            if "closed" in outcomes:
                raise Problem(410, f"collection {view.collection!r} is closed: it takes no more reports")
            counts = {key: outcomes.count(key) for key in ("accepted", "duplicate", "rejected")}
            return _json(200, {**counts, "results": outcomes}, origin)
        raise Problem(415, f"send one sealed report as {SEALED}, or a batch as {MSGPACK}")
    except Problem as problem:
        return _problem(problem, origin)


async def close_collection(request: web.Request) -> web.Response:
    """Release every report of a collection now and take no more (the token the shuffler presents
    to the aggregator, whose operator holds it too): ``{"pad": true}`` pads a last batch short of
    the floor with dummies; without it, fewer than a batch left is refused (409)."""
    shuffler = request.app[SHUFFLER]
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {shuffler.settings.token}".encode()):
        return _json(403, {"error": "closing a collection takes the token this shuffler presents to its aggregator"})
    try:
        try:
            data = json.loads(await _body(request, 1024) or b"{}")
        except ValueError:
            data = None
        if not isinstance(data, dict) or set(data) - {"pad"} or not isinstance(data.get("pad", False), bool):
            raise Problem(400, "send {'pad': true or false}")
        view = await shuffler.views.get(request.match_info["collection_id"])
        done = await shuffler.releaser.close(view, data.get("pad", False))
    except Problem as problem:
        return _problem(problem)
    except StoreUnavailable as exc:
        return _json(503, {"error": f"{exc}; retry"}, retry_after=1)
    return _json(200, {"id": view.collection, "closed": True, **done})


async def get_view(request: web.Request) -> web.Response:
    """The collection's view; refusals carry the page's CORS header too, so that a survey page can
    read why there is none (a device deciding whether it may report to a collection directly)."""
    origin = None
    try:
        origin = _origin(request)
        view = await request.app[SHUFFLER].views.get(request.match_info["collection_id"])
    except Problem as problem:
        return _problem(problem, origin)
    return _json(200, view.to_dict(), origin)


async def list_views(request: web.Request) -> web.Response:
    try:
        views = await request.app[SHUFFLER].store.views()
    except StoreUnavailable as exc:
        return _json(503, {"error": f"{exc}; retry"}, retry_after=1)
    return _json(200, {"views": [
        {"id": v.collection, "digest": v.digest.hex(), "min_batch": v.min_batch, "dummies": v.dummies} for v in views
    ]})  # fmt: skip


async def get_collection(request: web.Request) -> web.Response:
    shuffler = request.app[SHUFFLER]
    collection_id = request.match_info["collection_id"]
    try:
        return await _progress(shuffler, collection_id)
    except StoreUnavailable as exc:
        return _json(503, {"error": f"{exc}; retry"}, retry_after=1)


async def _progress(shuffler: Shuffler, collection_id: str) -> web.Response:
    """What anyone may know of a collection here: its view's identity, the floor and dummies its
    batches are held to now, people's reports forwarded, whether it closed, and why its last
    forward failed; never anything of what waits (the module's text says why)."""
    view = await shuffler.store.view(collection_id)
    if view is None:
        return _json(404, {"error": f"this shuffler has pinned no view of collection {collection_id!r}"})
    floor, dummies = shuffler.releaser.floor(view)
    answer = {
        "id": collection_id, "uid": view.uid, "fingerprint": view.spec.fingerprint, "digest": view.digest.hex(),
        "min_batch": floor, "dummies": dummies, "forwarded": await shuffler.store.forwarded_count(collection_id),
        "closed": await shuffler.store.closed(collection_id),
    }  # fmt: skip
    if collection_id in shuffler.releaser.failures:
        answer["problem"] = shuffler.releaser.failures[collection_id]
    return _json(200, answer)


async def operator_status(request: web.Request) -> web.Response:
    shuffler = request.app[SHUFFLER]
    token = shuffler.settings.operator_token
    given = request.headers.get("Authorization", "").encode()
    if token is None or not hmac.compare_digest(given, f"Bearer {token}".encode()):
        return _json(403, {"error": "what waits is told to this shuffler's operator alone (serve --operator-token-file)"})
    try:
        return _json(200, {"collections": await shuffler.store.operator_rows()})
    except StoreUnavailable as exc:
        return _json(503, {"error": f"{exc}; retry"}, retry_after=1)


async def healthz(request: web.Request) -> web.Response:
    shuffler = request.app[SHUFFLER]
    try:
        await shuffler.store.writable()
    except Exception as exc:  # noqa: BLE001 (whatever the store's trouble, the check answers)
        return _json(503, {"status": "unavailable", "reason": failure_reason(exc)})
    return _json(200, {"status": "ok"})


# Bodies are read against each collection's own limit as they arrive (_body); this only bounds
# what aiohttp would buffer for a handler that read the whole body at once.
CLIENT_MAX_SIZE = 64 * 1024 * 1024


def create_app(settings: Settings, store: Store) -> web.Application:
    """The shuffler's application; its release rounds run while the application does."""
    app = web.Application(client_max_size=CLIENT_MAX_SIZE)
    app[SHUFFLER] = Shuffler(settings, store)
    app.router.add_route("POST", "/collections/{collection_id}/reports", post_reports)
    app.router.add_route("OPTIONS", "/collections/{collection_id}/reports", preflight)
    app.router.add_get("/collections/{collection_id}/view", get_view)
    app.router.add_post("/collections/{collection_id}/close", close_collection)
    app.router.add_route("OPTIONS", "/collections/{collection_id}/view", preflight)
    app.router.add_get("/collections/{collection_id}", get_collection)
    app.router.add_get("/views", list_views)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/status", operator_status)
    app.cleanup_ctx.append(_running)
    return app


async def _running(app: web.Application):
    """The release rounds while the application runs. Stopping (after the server has answered or
    closed every request): the round under way is abandoned where it is, which loses nothing,
    since each step of it is one transaction of the store (a batch drawn stays drawn; one
    forwarded and not yet acknowledged is forwarded again after a restart, and the aggregator
    counts it once by its id); the commit under way finishes; the log is scrubbed as after a
    round; the store is let go of."""
    shuffler = app[SHUFFLER]
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    shuffler.views.session = shuffler.releaser.session = session
    loop = asyncio.ensure_future(shuffler.releaser.run())
    yield
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)
    if shuffler._committing is not None:
        await asyncio.gather(shuffler._committing, return_exceptions=True)
    shuffler.releaser.stop()
    await session.close()
    try:
        await shuffler.store.scrub()
    except StoreUnavailable as exc:  # what it left is scrubbed at the next start's first round
        log.error("stopping: %s", exc)
    await shuffler.store.shut()
