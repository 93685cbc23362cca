"""Releasing batches and forwarding them: one round every ``interval`` seconds, whatever arrived.

A round, for every collection with a pinned view and at least its floor of reports waiting:

1. the floor is the larger of the view's and the shuffler's own ``--min-batch`` *now*, and the
   dummies the larger of the view's and its own now (``--dummies``, by default as many as the
   floor: :func:`~shuffler.views.least_dummies`; a restart with larger ones holds);
2. the batches are sized to the aggregator's published request limits (``GET /limits``): each
   batch is one request, so that its people hide among the whole batch, never a part of it;
3. each batch's dummies are drawn by the collection's own randomiser through the device's code
   (:func:`participant.dummies.draw_dummies`, the operating system's CSPRNG), packed and sealed
   under the view like a device's report, in a process of their own (the GIL they would hold is
   the intake's);
4. the store draws the batches in one transaction (:meth:`~shuffler.store.Store.release`), and
   remembers every report of them, people's and dummies' alike, as released.

Then every batch not yet acknowledged is forwarded, each collection on its own (one that the
aggregator refuses or cannot take never delays another's), its batches oldest first, two at a time:
``{"batch", "size", "dummies", "view": {"min_batch", "dummies"}, "reports"}`` with the shuffler's
token. A batch acknowledged leaves the store. After every round that drew or forwarded anything,
the store's log is scrubbed, whether or not the aggregator acknowledged: what it withholds keeps
nothing in arrival order. Once an hour, released digests older than the horizon
(``--forget-after`` days) are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import aiohttp
import msgpack

from participant.dummies import draw_dummies
from participant.randomness import SecureGenerator
from participant.reasons import failure_reason
from participant.sealing import seal, sealed_length
from participant.usage import die_with_parent
from participant.view import ShuffledView
from participant.wire import pack_report

from .problems import Problem
from .store import StoreUnavailable, today
from .views import least_dummies, people_per_batch

log = logging.getLogger("shuffler")
MSGPACK = "application/msgpack"
# Batches of one collection in flight to the aggregator at once: it opens one in its processes
# while it stores the one before.
IN_FLIGHT = 2
# Seconds between two sweeps of released digests past the horizon.
EXPIRY_EVERY = 3600.0


def sealed_dummies(view: ShuffledView, count: int) -> list[bytes]:
    """``count`` dummy reports of ``view``'s collection, sealed under it as a device seals."""
    spec = view.spec
    return [seal(pack_report(report, spec), view) for report in draw_dummies(spec, count, SecureGenerator())]


class Releaser:
    """The release rounds of one shuffler: its settings, its store and views, and the aggregator's
    ``session``."""

    def __init__(self, store, views, settings):
        self.store, self.views, self.settings = store, views, settings
        self.session: aiohttp.ClientSession | None = None
        self.failures: dict[str, str] = {}  # per collection: why its last forward failed
        self.on_release = lambda collection_id: None  # told of every collection batches were drawn of
        # Collections closed (by this instance, or learnt from the store at a round): they take no reports.
        self.closed: set[str] = set()
        self._drawer: ProcessPoolExecutor | None = None
        self._expired_at = -EXPIRY_EVERY

    def drawer(self) -> ProcessPoolExecutor:
        """The process dummies are drawn and sealed in (started on first use)."""
        if self._drawer is None:
            context = multiprocessing.get_context("spawn")
            self._drawer = ProcessPoolExecutor(1, mp_context=context, initializer=die_with_parent)
        return self._drawer

    def stop(self) -> None:
        """Stop the process dummies are drawn in."""
        if self._drawer is not None:
            self._drawer.shutdown(wait=False, cancel_futures=True)
            self._drawer = None

    def floor(self, view: ShuffledView) -> tuple[int, int]:
        """The floor and dummies a batch of ``view``'s collection is held to now."""
        floor = max(view.min_batch, self.settings.min_batch)
        return floor, max(view.dummies, least_dummies(self.settings.dummies, floor))

    async def release(self, view: ShuffledView, waiting: int) -> list[int]:
        """Draw the collection's batches if ``waiting`` reports make at least one; their ids."""
        floor, dummies = self.floor(view)
        if waiting < floor:
            return []
        room = people_per_batch(await self.views.aggregator_limits(), sealed_length(view.spec), dummies)
        if room < floor:
            self.failures[view.collection] = (
                f"a batch of {floor} reports and {dummies} dummies no longer fits in one request to the aggregator"
            )
            log.error("collection %s: %s", view.collection, self.failures[view.collection])
            return []
        count = max(1, min(-(-waiting // room), waiting // floor))
        blankets = [[] for _ in range(count)]
        if dummies:  # drawn and sealed in a process of their own: intake never waits on them
            blankets = await asyncio.gather(*(self._dummies(view, dummies) for _ in range(count)))
        drawn = await self.store.release(view.collection, floor, room, blankets)
        self.on_release(view.collection)
        return drawn

    async def close(self, view: ShuffledView, pad: bool) -> dict:
        """Release every report of the collection now and take no more: in batches of at least the
        floor and, with ``pad``, a last one of the fewer left, padded to the floor with dummies in
        place of the people it lacks (drawn like any dummy: the shuffle bound counts them alike).
        Without ``pad``, fewer than a batch left keep waiting (a later close with ``pad`` releases
        them). A close always closes, whatever waits: were it refused while too few wait, a close
        would be a question asked again and again, telling when the first person arrived. The
        released set is then dropped (every report to a closed collection is refused before it
        is looked up) and the log scrubbed. Returns ``{"batches", "people", "padding",
        "waiting"}``: what was drawn, and how many still wait unpadded."""
        floor, dummies = self.floor(view)
        async with self.store.holding(view.collection) as held:
            if not held:
                raise Problem(503, "another instance is releasing this collection now; retry", 1.0)
            # Closed first: once the store says so no report can land after the count below, so
            # every report acknowledged before the close is in it.
            await self.store.close(view.collection)
            self.closed.add(view.collection)
            waiting = await self.store.waiting(view.collection)
            drawn = await self.release(view, waiting) if waiting >= floor else []
            left = await self.store.waiting(view.collection)
            padding = 0
            if left and pad:
                padding = floor - left
                blanket = await self._dummies(view, dummies + padding)
                drawn += await self.store.release(view.collection, 1, left, [blanket], padding)
            await self.store.forget(view.collection)
            try:
                await self.store.scrub()
            except StoreUnavailable as exc:  # the close stands; the next round scrubs again
                log.error("collection %s: %s", view.collection, exc)
        self.on_release(view.collection)
        return {"batches": len(drawn), "people": waiting - (0 if padding else left), "padding": padding,
                "waiting": 0 if padding else left}  # fmt: skip

    async def _dummies(self, view: ShuffledView, count: int) -> list[bytes]:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.drawer(), sealed_dummies, view, count)
        except BrokenProcessPool:
            self.stop()
            raise Problem(503, "the process that draws dummies died; retry", 1.0) from None

    async def round(self) -> None:
        """Release what is due, then forward every batch not yet acknowledged: each collection on
        its own, by the one instance that holds it this round; then scrub the log if anything was
        drawn or acknowledged, and sweep the released digests past the horizon once an hour."""
        waiting = await self.store.waiting_all()
        for collection_id in set(waiting) - self.closed:  # closed by another instance meanwhile?
            if await self.store.closed(collection_id):
                self.closed.add(collection_id)
        by_collection: dict[str, list[int]] = {}
        for batch, collection_id in await self.store.in_flight():
            by_collection.setdefault(collection_id, []).append(batch)
        changed = await asyncio.gather(*(self._collection(cid, waiting.get(cid, 0), by_collection.get(cid, []))
                                         for cid in set(waiting) | set(by_collection)))  # fmt: skip
        now = asyncio.get_running_loop().time()
        if now - self._expired_at >= EXPIRY_EVERY:
            self._expired_at = now
            if await self.store.expire(today() - self.settings.forget_after):
                changed.append(True)
        if any(changed) or self.store.unscrubbed:
            await self.store.scrub()

    async def _collection(self, collection_id: str, waiting: int, batches: list[int]) -> bool:
        """One collection's round: its release, then its batches (those drawn before and now)
        forwarded, if this instance holds it; whether any batch was drawn or acknowledged."""
        try:
            async with self.store.holding(collection_id) as held:
                if not held:
                    return False
                view = await self.views.get(collection_id)
                drawn = []
                if waiting:
                    drawn = await self.release(view, waiting)
                    batches = sorted({*batches, *drawn})
                return await self._forward_all(collection_id, batches) or bool(drawn)
        except (Problem, StoreUnavailable) as problem:
            log.warning("collection %s: %s", collection_id, problem)
            return False

    async def _forward_all(self, collection_id: str, batches: list[int]) -> bool:
        """Forward a collection's batches oldest first, :data:`IN_FLIGHT` at a time (the aggregator
        opens one while it stores another), sending no more once one is not acknowledged; whether
        any was acknowledged."""
        acknowledged, failed = False, False
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def one(batch_id: int) -> None:
            nonlocal acknowledged, failed
            async with slots:
                if failed:
                    return
                batch = await self.store.batch(batch_id)
                if batch is None:  # acknowledged meanwhile (recorded by another instance)
                    return
                view = await self.views.get(collection_id)
                if not await self._forward(view, batch):
                    failed = True
                    return
                await self.store.forwarded(batch_id)
                self.failures.pop(collection_id, None)
                acknowledged = True
                log.info("forwarded a batch of %d reports (%d dummies) of %s", len(batch.sealed), batch.dummies, collection_id)

        await asyncio.gather(*(one(batch_id) for batch_id in batches))
        return acknowledged

    async def _forward(self, view: ShuffledView, batch) -> bool:
        """Send one batch to the aggregator; whether it was acknowledged."""
        url = f"{self.settings.aggregator}/collections/{view.collection}/shuffled"
        headers = {"Authorization": f"Bearer {self.settings.token}", "Content-Type": MSGPACK, "Accept": MSGPACK}
        body = msgpack.packb({
            "batch": batch.name, "size": len(batch.sealed), "dummies": batch.dummies, "padding": batch.padding,
            "view": {"min_batch": view.min_batch, "dummies": view.dummies}, "reports": batch.sealed,
        })  # fmt: skip
        try:
            async with self.session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                text = await answer.read()
                if 200 <= answer.status < 300:
                    return True
                reason = f"the aggregator answered {answer.status}: {text[:300].decode(errors='replace')}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = f"the aggregator cannot be reached: {failure_reason(exc)}"
        self.failures[view.collection] = reason
        log.warning("collection %s: %s; retrying next round", view.collection, reason)
        return False

    async def run(self) -> None:
        """A round every ``interval`` seconds, on the clock, until cancelled."""
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while True:
            next_round += self.settings.interval
            try:
                await self.round()
            except Exception:  # noqa: BLE001 (a failed round is logged; the next one retries)
                log.exception("a release round failed")
            await asyncio.sleep(max(0.0, next_round - loop.time()))
