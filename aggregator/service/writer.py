"""Group commit: reports from concurrent requests are stored in shared durable transactions.

Each request waits until the transaction holding its reports has committed, so an acknowledged
report is on disk, while many requests share one commit (one fsync). While one transaction runs,
the requests arriving meanwhile queue up and form the next, so groups grow with the load. A
store with several write lanes (PostgreSQL) keeps up to that many transactions in flight, one
per lane, when requests arrive while a commit travels to the database and back.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from ..store import IncomingBatch, Store, StoreUnavailable

# Requests grouped into one transaction until it holds this many reports (one request is never
# split: a large request comes as several, see ingestion._parts). What a transaction holds the loop for is its grouping and decoding, per (collection,
# input) group, not per report, and SQLite's statement work runs on a thread: a 10,000-report
# batch into a collection of 10^6 entries holds it 14 ms (bench/stall.py). At 500, eight batches
# of 1,000 in flight took eight durable commits instead of two, and SQLite's batched ingest fell
# from 190,000 to 91,000 reports/s.
MAX_REPORTS_PER_TRANSACTION = 4000
# And until it touches this many (collection, input) groups: a store's work on the loop is per
# group, so reports spread over many inputs (10,000 reports into a 55,001-input collection) make
# a transaction as long as many more reports into one input.
MAX_GROUPS_PER_TRANSACTION = 64
MAX_EXTRA_TURNS = 3


def fair_order(pending: list[tuple[list, asyncio.Future]], served: dict) -> list[int]:
    """Positions of ``pending`` requests in the order a group takes them: the first request of
    every collection, then the second of every collection, and so on; within a turn, the
    collections served longest ago first (``served``: a collection's last group's number), so that
    two collections queueing wide parts take one group each in turn."""
    turns: dict[object, int] = {}
    ranked = []
    for position, (batches, _) in enumerate(pending):
        key = getattr(batches[0], "collection_id", None) if batches else None
        turn = turns[key] = turns.get(key, -1) + 1
        ranked.append((turn, served.get(key, -1), position))
    return [position for _, _, position in sorted(ranked)]


class ReportWriter:
    """Takes requests' reports and stores them in group commits, one transaction in flight on each
    of the store's write lanes (:meth:`~aggregator.store.Store.lanes`): one lane gathers the next
    group while the others wait for their commits."""

    def __init__(self, store: Store, timeout: float = 5.0):
        self.store = store
        self.lanes = store.lanes()
        self.timeout = timeout
        self.pending: list[tuple[list[IncomingBatch], asyncio.Future]] = []
        self.wakeup = asyncio.Event()
        # One lane gathers at a time, so that requests form one group, not one per idle lane.
        self.gathering = asyncio.Lock()
        self.tasks: list[asyncio.Task] = []
        # When each lane's transaction in flight began (monotonic seconds), and the last write the
        # database refused or held: (monotonic time, what a client is told), cleared by a commit.
        self.in_flight: dict[int, float] = {}
        self.last_failure: tuple[float, str] | None = None
        # When a transaction last committed (the loop's clock): a queued request waits while commits go on.
        self.progress: float | None = None
        # Groups taken so far, and the number of the last that took each collection's reports (fair_order).
        self.taken = 0
        self.served: dict = {}

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._run(lane), name="ldpnb-report-writer") for lane in self.lanes]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def submit(self, batches: list[IncomingBatch]) -> list[np.ndarray]:
        """Store ``batches``; returns per batch the reports' outcomes (see
        :meth:`~aggregator.store.Store.ingest`), once the transaction holding them has committed.

        Raises :class:`StoreUnavailable` when that takes longer than :attr:`timeout` seconds,
        whatever held it (the queue behind a stuck transaction, the pool, a lock, a frozen link):
        taken back from the queue if no transaction took it yet (nothing stored), else with
        ``maybe_stored`` (its transaction may still commit; a re-send is then a duplicate)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        item = (batches, future)
        self.pending.append(item)
        self.wakeup.set()
        # One timer per request (asyncio.wait_for and a shield cost a report 10 µs more).
        future.timer = loop.call_at(loop.time() + self.timeout, self._expire, item)  # type: ignore[attr-defined]
        try:
            return await future
        finally:
            future.timer.cancel()  # type: ignore[attr-defined]

    def _expire(self, item: tuple[list[IncomingBatch], asyncio.Future]) -> None:
        """A request's :attr:`timeout` has passed without its transaction committing: fail it, taken
        back from the queue if no transaction took it yet (nothing stored), else with
        ``maybe_stored`` (the transaction answers later, to nobody: :meth:`_commit` skips a future
        already done).

        Unless the database is keeping up: a request still queued while a commit ended within the
        timeout, or whose own transaction began within it, waits on (the timer set again from
        then). The timeout bounds how long the database may make no progress, not how long a
        request may queue behind others being stored (a batch of 10,000 reports into a
        collection of 55,001 inputs is 157 transactions, of 64 inputs each)."""
        future = item[1]
        if future.done():
            return
        # By identity: two requests may carry equal batches (a device re-sending while the first
        # is in flight), and comparing batches compares their numpy rows.
        queued = any(entry is item for entry in self.pending)
        loop = asyncio.get_running_loop()
        began = getattr(future, "began", None)
        progress = self.progress if queued else began
        if progress is not None and loop.time() - progress < self.timeout:
            future.timer = loop.call_at(progress + self.timeout, self._expire, item)  # type: ignore[attr-defined]
            return
        if queued:
            self.pending = [entry for entry in self.pending if entry is not item]
            if not self.pending:
                self.wakeup.clear()
        elsewhere = getattr(self.store, "held_elsewhere", None)  # a store that can tell names who holds it
        held = (elsewhere and elsewhere()) or f"the database did not take the write within {self.timeout:g} s"
        self.last_failure = (time.monotonic(), held)
        future.set_exception(StoreUnavailable(held, held, maybe_stored=not queued))

    def problem(self) -> str | None:
        """Why writes are not going through now, or None: a transaction in flight longer than the
        timeout, or a write the database refused or held within the last two timeouts (and none
        committed since)."""
        now = time.monotonic()
        if any(now - began > self.timeout for began in self.in_flight.values()):
            return f"a write has waited for the database more than {self.timeout:g} s"
        if self.last_failure is not None and now - self.last_failure[0] < 2 * self.timeout:
            return self.last_failure[1]
        return None

    def _take(self) -> list[tuple[list[IncomingBatch], asyncio.Future]]:
        """The next group's requests, up to the caps: the oldest request of each collection in
        turn, then the second of each, and so on (:func:`fair_order`), so that one collection's
        wide batch, queued as many parts, never makes another's reports wait behind all of them."""
        taken, size, groups = [], 0, 0
        now = asyncio.get_running_loop().time()
        order = fair_order(self.pending, self.served)
        self.taken += 1
        chosen = set()
        for position in order:
            if size >= MAX_REPORTS_PER_TRANSACTION or groups >= MAX_GROUPS_PER_TRANSACTION:
                break
            item = self.pending[position]
            item[1].began = now  # type: ignore[attr-defined]
            if item[0]:
                self.served[getattr(item[0][0], "collection_id", None)] = self.taken
            taken.append(item)
            chosen.add(position)
            size += sum(map(len, item[0]))
            groups += len(item[0])
        self.pending = [item for position, item in enumerate(self.pending) if position not in chosen]
        if not self.pending:
            self.wakeup.clear()
        return taken

    async def _run(self, lane: Store) -> None:
        while True:
            async with self.gathering:
                group = await self._gather()
            await self._commit(lane, group)

    async def _gather(self) -> list[tuple[list[IncomingBatch], asyncio.Future]]:
        """The next group of requests, once at least one is waiting (never empty: only the lane
        holding :attr:`gathering` takes from the queue, and the wakeup stays set while the queue
        holds a request)."""
        await self.wakeup.wait()
        # Let every request that is ready join this transaction: each yield runs one turn of
        # the loop, which reads the sockets that have data. While requests keep joining (under
        # load), yield again, up to MAX_EXTRA_TURNS: the commit's fsync is paid once per group,
        # and at 64 requests in flight the extra turns doubled the groups (30 to 59 reports)
        # and cut the CPU a report costs by 8 %. A lone request is committed after one turn.
        await asyncio.sleep(0)
        for _ in range(MAX_EXTRA_TURNS):
            waiting = len(self.pending)
            await asyncio.sleep(0)
            if len(self.pending) == waiting:
                break
        return self._take()

    async def _commit(self, lane: Store, group: list[tuple[list[IncomingBatch], asyncio.Future]]) -> None:
        """Store ``group`` in one transaction on ``lane`` and answer its requests."""
        combined = [batch for batches, _ in group for batch in batches]
        try:
            accepted = await self._ingest(lane, combined)
        except Exception as exc:  # the whole transaction rolled back: nobody is acknowledged yet
            if len(group) > 1 and not isinstance(exc, StoreUnavailable):
                # One request's reports must not cost the others theirs: each alone.
                for batches, future in group:
                    await self._alone(lane, batches, future)
                return
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for batches, future in group:
            if not future.done():
                future.set_result(accepted[start : start + len(batches)])
            start += len(batches)

    async def _ingest(self, lane: Store, batches: list[IncomingBatch]) -> list[np.ndarray]:
        """``lane.ingest(batches)``, noting when it began and how it ended (:meth:`problem`)."""
        self.in_flight[id(lane)] = time.monotonic()
        try:
            result = await lane.ingest(batches)
        except StoreUnavailable as exc:
            self.last_failure = (time.monotonic(), str(exc))
            raise
        finally:
            self.in_flight.pop(id(lane), None)
        self.last_failure = None
        self.progress = asyncio.get_running_loop().time()
        return result

    async def _alone(self, lane: Store, batches: list[IncomingBatch], future: asyncio.Future) -> None:
        try:
            result = await self._ingest(lane, batches)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)
