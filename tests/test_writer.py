"""The group commit: requests arriving while the writer gathers a group share its transaction
(one fsync), and one request's failure does not cost the others theirs."""

from __future__ import annotations

import asyncio

import numpy as np

from aggregator.service.writer import ReportWriter
from aggregator.store import DUPLICATE, NEW, IncomingBatch


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
    # The held write is never released here: both would wait for ever without their timeouts.
    outcomes = await asyncio.wait_for(asyncio.gather(held, queued, return_exceptions=True), 30)
    took = loop.time() - started
    assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    assert outcomes[0].maybe_stored and not outcomes[1].maybe_stored
    assert took >= 0.2
    assert writer.problem() == "a write has waited for the database more than 0.2 s"
    store.release.set()
    await asyncio.sleep(0.05)
    await writer.stop()
    assert store.seen == [["a"]]  # "b" never reached a transaction


class Slow:
    """A store whose every transaction takes ``seconds`` and commits."""

    def __init__(self, seconds: float):
        self.seconds, self.groups = seconds, []

    def lanes(self):
        return [self]

    async def ingest(self, batches):
        self.groups.append(len(batches))
        await asyncio.sleep(self.seconds)
        return [np.full(len(b), NEW, dtype=np.int8) for b in batches]


async def test_requests_queued_behind_commits_that_keep_coming_wait_and_are_all_stored():
    """Twelve requests of a full transaction each (a large request's parts), every commit taking
    a quarter of the timeout: the last is stored after three timeouts, and none is refused, since
    the database never stopped taking writes (once it does, the held-write test below holds)."""
    from aggregator.service.writer import MAX_GROUPS_PER_TRANSACTION

    store = Slow(0.05)
    writer = ReportWriter(store, timeout=0.2)
    writer.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    part = [[1]] * MAX_GROUPS_PER_TRANSACTION  # a full transaction's worth of inputs
    outcomes = await asyncio.gather(*(writer.submit(part) for _ in range(12)), return_exceptions=True)
    took = loop.time() - started
    await writer.stop()
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert store.groups == [MAX_GROUPS_PER_TRANSACTION] * 12 and took >= 0.6


async def test_two_multi_input_requests_crossing_the_cap_share_a_commit_and_each_hears_its_own_outcomes(database):
    """Two requests of 2,500 reports over two inputs each, arriving together, and a third just
    after, against a real store: the first two go in one transaction (together past the
    4,000-report cap: a request is never split), the third in the next. The second re-sends 300 of
    the first's reports: it hears those as duplicates, at their places, and everything else is
    new; the statistics count every report once."""
    from aggregator.service.app import open_store
    from aggregator.service.writer import MAX_REPORTS_PER_TRANSACTION
    from participant import CollectionSpec, Feature
    from participant.wire import decode_values

    markers = 6_000  # input 1's value marks its report: a double count shows as a 2
    spec = CollectionSpec([Feature("tag", [f"t{i}" for i in range(markers // 2)])], ["a", "b"], "DE", 1.0)
    store, _ = await open_store(database, "writer-test-admin-token-0123456789")
    collection = await store.create_collection("m", spec, 0)
    writer = ReportWriter(store, timeout=30)
    sizes: list[int] = []
    for lane in writer.lanes:
        real = lane.ingest

        async def ingest(batches, real=real):
            sizes.append(sum(map(len, batches)))
            return await real(batches)

        lane.ingest = ingest

    def batch(index: int, ids: list[int], values: list[int]) -> IncomingBatch:
        rows = decode_values(spec.oracles[index], values, index)[0]
        return IncomingBatch("m", index, [i.to_bytes(16, "big") for i in ids], values, rows)

    def request(first: int, count: int, resent: list[int] = ()) -> list[IncomingBatch]:
        marked = [*resent, *range(first, first + count - len(resent))]
        classes = [batch(0, [10**6 + i for i in range(first, first + count)], [i % 2 for i in range(count)])]
        return classes + [batch(1, marked, marked)]

    a, b, c = request(0, 1_250), request(1_250, 1_250, resent=list(range(300))), request(2_500, 5)
    assert sum(map(len, a)) + sum(map(len, b)) > MAX_REPORTS_PER_TRANSACTION > sum(map(len, a))
    writer.start()
    try:
        outcomes = await asyncio.gather(writer.submit(a), writer.submit(b), writer.submit(c))
    finally:
        await writer.stop()
    try:
        assert sorted(sizes) == [10, 5_000]
        assert [o.tolist() for o in outcomes[0]] == [[NEW] * 1_250] * 2
        assert outcomes[1][0].tolist() == [NEW] * 1_250
        assert outcomes[1][1].tolist() == [DUPLICATE] * 300 + [NEW] * 950
        assert [o.tolist() for o in outcomes[2]] == [[NEW] * 5] * 2
        state = (await store.statistics(collection)).states[1]
        expected = np.zeros(markers)
        expected[:2_200] = expected[2_500:2_505] = 1  # a's 1,250, b's 950 new, c's 5
        np.testing.assert_array_equal(state.support, expected)
        assert await store.count_reports(collection) == 2_505 + 2_205
    finally:
        await store.close()


class Collected:
    """A store that records, for every transaction, the collections of its requests in order."""

    def __init__(self):
        self.groups: list[list[str]] = []

    def lanes(self):
        return [self]

    async def ingest(self, batches):
        self.groups.append([b.collection_id for b in batches])
        await asyncio.sleep(0.01)  # a commit takes time: requests arriving meanwhile queue
        return [np.full(len(b), NEW, dtype=np.int8) for b in batches]


async def test_one_collections_wide_batch_queued_as_many_parts_never_holds_anothers_single_report_behind_them_all():
    """A wide batch of one collection arrives as twenty requests of 64 inputs each (a transaction's
    cap), then one report of another collection: the report goes into the next transaction, beside
    the batch's next part, not behind all twenty (first come, first served, it waited for twenty
    commits: the review saw 24 s at p99)."""
    store = Collected()
    writer = ReportWriter(store)
    writer.start()
    wide = [
        asyncio.ensure_future(writer.submit([IncomingBatch("wide", i, [b"x"], [0], None) for i in range(64)]))
        for _ in range(20)
    ]
    await asyncio.sleep(0.005)  # the first part is being stored
    single = asyncio.ensure_future(writer.submit([IncomingBatch("other", 0, [b"y"], [0], None)]))
    await asyncio.gather(*wide, single)
    await writer.stop()
    which = next(n for n, group in enumerate(store.groups) if "other" in group)
    assert which <= 1, [sorted(set(g)) for g in store.groups]
    assert sum(g.count("wide") for g in store.groups) == 20 * 64  # every part stored, each once


async def test_two_collections_queueing_wide_parts_take_groups_in_turn():
    """Two collections each queue ten parts of 64 inputs: the groups alternate between them (first
    come, first served, the second waited for all ten of the first's)."""
    store = Collected()
    writer = ReportWriter(store)
    writer.start()
    parts = [
        asyncio.ensure_future(writer.submit([IncomingBatch(cid, i, [b"x"], [0], None) for i in range(64)]))
        for cid in ("a", "b")
        for _ in range(10)
    ]
    await asyncio.gather(*parts)
    await writer.stop()
    firsts = [group[0] for group in store.groups]
    assert firsts[:6] in (["a", "b"] * 3, ["b", "a"] * 3), firsts
