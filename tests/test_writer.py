"""The group commit: requests arriving while the writer gathers a group share its transaction
(one fsync), and one request's failure does not cost the others theirs."""

from __future__ import annotations

import asyncio

import numpy as np

from aggregator.service.writer import ReportWriter
from aggregator.store import NEW


class Recording:
    """A store that records the size of every transaction and accepts everything."""

    def __init__(self):
        self.groups: list[int] = []

    def lanes(self):
        return [self]

    async def ingest(self, batches):
        self.groups.append(len(batches))
        await asyncio.sleep(0)  # a commit takes time; requests arriving meanwhile form the next group
        return [np.full(len(b), NEW, dtype=np.int8) for b in batches]


async def test_requests_arriving_over_the_next_loop_turns_share_one_commit():
    """A request, then one more on each of the next three loop turns, as sockets with data are read
    one turn after another under load: all four go into one transaction (with a single turn of
    gathering, as before, they took two)."""
    store = Recording()
    writer = ReportWriter(store)
    writer.start()
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Task] = []

    def arrive(turn: int) -> None:
        pending.append(loop.create_task(writer.submit([[turn]])))
        if turn < 3:
            loop.call_soon(arrive, turn + 1)

    arrive(0)
    await asyncio.sleep(0.05)
    results = await asyncio.gather(*pending)
    await writer.stop()
    assert store.groups == [4]
    assert all(r[0][0] == NEW for r in results)


async def test_a_lone_request_is_committed_without_waiting_for_more():
    """With nothing else arriving, the writer commits after one extra turn finds no newcomer."""
    store = Recording()
    writer = ReportWriter(store)
    writer.start()
    await writer.submit([[1]])
    await writer.submit([[2]])
    await writer.stop()
    assert store.groups == [1, 1]


class HeldLanes:
    """A store of two write lanes whose transactions wait until released; records which lane
    took which request."""

    def __init__(self):
        self.release = asyncio.Event()
        self.groups: list[tuple[int, list]] = []

    def lanes(self):
        return [HeldLane(self, i) for i in range(2)]


class HeldLane:
    def __init__(self, store: HeldLanes, index: int):
        self.store, self.index = store, index

    async def ingest(self, batches):
        self.store.groups.append((self.index, batches))
        await self.store.release.wait()
        return [np.full(len(b), NEW, dtype=np.int8) for b in batches]


async def test_while_one_lane_waits_for_its_commit_the_next_lane_takes_the_next_request():
    """Two lanes: the first request's transaction is in flight on one lane, the second request
    goes to the other at once, and a third waits for a lane to come free."""
    store = HeldLanes()
    writer = ReportWriter(store)
    writer.start()
    requests = []
    for n in (1, 2, 3):
        requests.append(asyncio.create_task(writer.submit([[n]])))
        await asyncio.sleep(0.01)
    assert store.groups == [(0, [[1]]), (1, [[2]])]
    store.release.set()
    await asyncio.gather(*requests)
    await writer.stop()
    assert [batches for _, batches in store.groups] == [[[1]], [[2]], [[3]]]


class Held:
    """A store whose every transaction waits until :attr:`release` is set (a lock or a frozen link)."""

    def __init__(self):
        self.release = asyncio.Event()
        self.seen: list = []

    def lanes(self):
        return [self]

    async def ingest(self, batches):
        self.seen += batches
        await self.release.wait()
        return [np.full(len(b), NEW, dtype=np.int8) for b in batches]


async def test_a_held_write_fails_within_the_timeout_and_a_queued_one_is_taken_back():
    """A request whose transaction the database holds past the timeout fails then, saying its
    reports may have been stored; one queued behind it fails at its own timeout, taken back from
    the queue, so that nothing of it is ever written; /healthz's problem names the held write."""
    from aggregator.store import StoreUnavailable

    store = Held()
    writer = ReportWriter(store, timeout=0.2)
    writer.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    held = loop.create_task(writer.submit([["a"]]))
    await asyncio.sleep(0.05)  # "a" is in its transaction
    queued = loop.create_task(writer.submit([["b"]]))
    outcomes = await asyncio.gather(held, queued, return_exceptions=True)
    took = loop.time() - started
    assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    assert outcomes[0].maybe_stored and not outcomes[1].maybe_stored
    assert 0.2 <= took < 0.4
    assert writer.problem() == "a write has waited for the database more than 0.2 s"
    store.release.set()
    await asyncio.sleep(0.05)
    await writer.stop()
    assert store.seen == [["a"]]  # "b" never reached a transaction
