"""The shuffler's HTTP service and the loop that releases batches to the aggregator.

Devices ``POST /collections/{id}/reports`` one sealed report (``application/ldpnb-sealed``) or a
batch of them (msgpack ``{"reports": [bytes, ...]}``); each is refused unless it has the one
length the collection's sealed reports have, stored, then acknowledged (``accepted``, or
``duplicate`` for bytes received before). A collection is learnt from the aggregator the first
time a device reports to it (``GET {aggregator}/collections/{id}``): its spec must be shuffled,
and what the shuffler holds it to is pinned then (:mod:`.store`). Reports arriving together are
stored in one commit.

Every ``interval`` seconds, whatever arrived: each collection with at least its ``min_batch``
reports waiting has them drawn into a batch in a random order, and every batch not yet
acknowledged is sent to ``POST {aggregator}/collections/{id}/shuffled`` with the shuffler's token,
in parts of at most ``max_batch`` reports; it is deleted once every part was answered 2xx.

``GET /collections/{id}`` tells anyone how many reports wait (what the operator's status shows);
``GET /healthz`` whether the store answers. A web page the operator names (``--allow-origin``)
may post reports from a browser; nothing else carries CORS headers.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import aiohttp
import msgpack
from aiohttp import web

from participant.errors import SpecError
from participant.sealing import sealed_length
from participant.spec import CollectionSpec

from .store import Pinned, ShufflerStore

log = logging.getLogger("shuffler")
SEALED = "application/ldpnb-sealed"
MSGPACK = "application/msgpack"


@dataclass
class Settings:
    """What the shuffler's operator decides: the ``aggregator`` it forwards to and the ``token`` it
    presents there, its own batch floor (``min_batch``, applied over every spec's), the release
    ``interval`` in seconds, the most reports in one part of a forwarded batch (``max_batch``) and
    the web pages whose browsers may post reports (``allowed_origins``)."""

    aggregator: str
    token: str
    min_batch: int = 100
    interval: float = 5.0
    max_batch: int = 10_000
    allowed_origins: tuple = ()
    max_body: int = 64 * 1024 * 1024


class Problem(Exception):
    """A request the shuffler refuses: ``status`` and the message a client is told."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Shuffler:
    """The running shuffler: its settings, its store (used from one worker thread), the reports
    waiting to be committed together, and its client session to the aggregator."""

    settings: Settings
    store: ShufflerStore
    worker: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="shuffler-store"))
    queue: list = field(default_factory=list)
    session: aiohttp.ClientSession | None = None
    _committing: asyncio.Task | None = None

    async def call(self, function, *args):
        """``function(*args)`` on the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, function, *args)

    async def pinned(self, collection_id: str) -> Pinned:
        """What the shuffler holds the collection to, learnt from the aggregator the first time."""
        known = await self.call(self.store.collection, collection_id)
        if known is not None:
            return known
        url = f"{self.settings.aggregator}/collections/{collection_id}"
        try:
            async with self.session.get(url, headers={"Accept": "application/json"}, allow_redirects=False) as answer:
                if answer.status == 404:
                    raise Problem(404, f"the aggregator has no collection {collection_id!r}")
                if answer.status != 200:
                    raise Problem(503, f"the aggregator answered {answer.status} for collection {collection_id!r}; retry later")
                data = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Problem(503, f"the aggregator cannot be reached ({type(exc).__name__}); retry later") from None
        try:
            spec = CollectionSpec.from_dict(data["spec"])
            published = data["fingerprint"]
        except (SpecError, KeyError, TypeError):
            raise Problem(502, f"the aggregator publishes no readable spec for {collection_id!r}") from None
        if spec.shuffle is None or spec.shuffle.key is None or published != spec.fingerprint:
            raise Problem(409, f"collection {collection_id!r} is not collected through a shuffler")
        floor = max(spec.shuffle.min_batch, self.settings.min_batch)
        return await self.call(self.store.pin, Pinned(collection_id, spec.fingerprint, floor, sealed_length(spec)))

    async def receive(self, collection_id: str, sealed: list[bytes]) -> list[str]:
        """Store reports of a collection (committed with whatever else arrived meanwhile); each one's outcome."""
        pinned = await self.pinned(collection_id)
        outcomes = [None] * len(sealed)
        fresh = []
        for i, item in enumerate(sealed):
            if not isinstance(item, bytes) or len(item) != pinned.sealed_length:
                outcomes[i] = "rejected"
            else:
                fresh.append(i)
        if fresh:
            done = asyncio.get_running_loop().create_future()
            self.queue.append(([(collection_id, sealed[i]) for i in fresh], done))
            if self._committing is None or self._committing.done():
                self._committing = asyncio.ensure_future(self._commit())
            for i, new in zip(fresh, await done):
                outcomes[i] = "accepted" if new else "duplicate"
        return outcomes

    async def _commit(self) -> None:
        """Commit every queued report in one transaction, until the queue is empty."""
        while self.queue:
            queued, self.queue = self.queue, []
            items = [item for reports, _ in queued for item in reports]
            try:
                outcomes = await self.call(self.store.add, items)
            except Exception as exc:  # noqa: BLE001 (every waiting request hears of it)
                for _, done in queued:
                    done.set_exception(Problem(503, f"the shuffler's store failed ({type(exc).__name__}); retry"))
                continue
            at = 0
            for reports, done in queued:
                done.set_result(outcomes[at : at + len(reports)])
                at += len(reports)

    async def release_and_forward(self) -> None:
        """One round: draw a batch for every collection that has enough, then forward every batch
        not yet acknowledged (oldest first; a batch the aggregator did not acknowledge waits for
        the next round)."""
        for collection_id in await self.call(self.store.ready):
            await self.call(self.store.release, collection_id)
        for batch, collection_id in await self.call(self.store.in_flight):
            sealed = await self.call(self.store.batch, batch)
            if not await self._forward(collection_id, sealed):
                return
            await self.call(self.store.forwarded, batch)
            log.info("forwarded a batch of %d reports of %s", len(sealed), collection_id)

    async def _forward(self, collection_id: str, sealed: list[bytes]) -> bool:
        """Send a batch to the aggregator in parts; whether every part was acknowledged."""
        url = f"{self.settings.aggregator}/collections/{collection_id}/shuffled"
        headers = {"Authorization": f"Bearer {self.settings.token}", "Content-Type": MSGPACK, "Accept": MSGPACK}
        step = self.settings.max_batch
        for start in range(0, len(sealed), step):
            body = msgpack.packb({"reports": sealed[start : start + step]})
            try:
                async with self.session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                    await answer.read()
                    if not 200 <= answer.status < 300:
                        log.warning("the aggregator answered %d to a batch of %s; retrying next round", answer.status, collection_id)
                        return False
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("the aggregator cannot be reached (%s); retrying next round", type(exc).__name__)
                return False
        return True

    async def run(self) -> None:
        """Release and forward every ``interval`` seconds, on the clock, until cancelled."""
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while True:
            next_round += self.settings.interval
            try:
                await self.release_and_forward()
            except Exception:  # noqa: BLE001 (a failed round is logged; the next one retries)
                log.exception("a release round failed")
            await asyncio.sleep(max(0.0, next_round - loop.time()))


SHUFFLER = web.AppKey("shuffler", Shuffler)


def _json(status: int, data: dict, origin: str | None = None) -> web.Response:
    response = web.json_response(data, status=status)
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    return response


async def post_reports(request: web.Request) -> web.StreamResponse:
    shuffler = request.app[SHUFFLER]
    origin = request.headers.get("Origin")
    if origin is not None and origin.lower() not in shuffler.settings.allowed_origins:
        return _json(403, {"error": f"requests from the web page at {origin[:100]} are not allowed (--allow-origin)"})
    if request.method == "OPTIONS":
        answer = web.Response(status=204, headers={"Access-Control-Allow-Methods": "POST", "Access-Control-Allow-Headers": "Content-Type, Accept"})
        answer.headers["Access-Control-Allow-Origin"] = origin or ""
        answer.headers["Vary"] = "Origin"
        return answer
    collection_id = request.match_info["collection_id"]
    body = await request.read()
    try:
        if request.content_type == SEALED:
            outcome = (await shuffler.receive(collection_id, [body]))[0]
            if outcome == "rejected":
                raise Problem(400, "a sealed report of this collection has another length")
            return _json(201 if outcome == "accepted" else 200, {"status": outcome}, origin)
        if request.content_type == MSGPACK:
            try:
                data = msgpack.unpackb(body, max_array_len=shuffler.settings.max_batch, max_map_len=1, max_str_len=16)
            except Exception:  # noqa: BLE001 (msgpack's several errors for bad input)
                raise Problem(400, f"a batch is msgpack {{'reports': [sealed, ...]}} of at most {shuffler.settings.max_batch}") from None
            if not isinstance(data, dict) or not isinstance(data.get("reports"), list):
                raise Problem(400, "a batch is msgpack {'reports': [sealed, ...]}")
            outcomes = await shuffler.receive(collection_id, data["reports"])
            counts = {key: outcomes.count(key) for key in ("accepted", "duplicate", "rejected")}
            return _json(200, {**counts, "results": outcomes}, origin)
        raise Problem(415, f"send one sealed report as {SEALED}, or a batch as {MSGPACK}")
    except Problem as problem:
        return _json(problem.status, {"error": str(problem)}, origin)


async def get_collection(request: web.Request) -> web.Response:
    shuffler = request.app[SHUFFLER]
    collection_id = request.match_info["collection_id"]
    pinned = await shuffler.call(shuffler.store.collection, collection_id)
    if pinned is None:
        return _json(404, {"error": f"no report of collection {collection_id!r} has reached this shuffler"})
    waiting = await shuffler.call(shuffler.store.waiting, collection_id)
    return _json(200, {"id": collection_id, "waiting": waiting, "min_batch": pinned.min_batch, "forwarded": pinned.forwarded})


async def healthz(request: web.Request) -> web.Response:
    shuffler = request.app[SHUFFLER]
    try:
        await shuffler.call(shuffler.store.in_flight)
    except Exception as exc:  # noqa: BLE001
        return _json(503, {"status": "unavailable", "reason": type(exc).__name__})
    return _json(200, {"status": "ok"})


def create_app(settings: Settings, store: ShufflerStore) -> web.Application:
    """The shuffler's application; its release loop runs while the application does."""
    app = web.Application(client_max_size=settings.max_body)
    app[SHUFFLER] = Shuffler(settings, store)
    app.router.add_route("POST", "/collections/{collection_id}/reports", post_reports)
    app.router.add_route("OPTIONS", "/collections/{collection_id}/reports", post_reports)
    app.router.add_get("/collections/{collection_id}", get_collection)
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(_running)
    return app


async def _running(app: web.Application):
    shuffler = app[SHUFFLER]
    shuffler.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    loop = asyncio.ensure_future(shuffler.run())
    yield
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)
    await shuffler.session.close()
    shuffler.worker.shutdown(wait=True)
    shuffler.store.close()
