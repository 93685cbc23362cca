"""A randomised check in the spirit of a model check: whatever mix of sends, replays, batches and
concurrent duplicates reaches the service, each report id is counted exactly once.

Every report carries a unique marker: its DE value is its own index in a 400-value domain, so the
running support vector must be exactly 1 at every marker sent and 0 elsewhere; a double count
would show as a 2, a lost report as a 0."""

import asyncio
import random

import aiohttp
import msgpack
import numpy as np
import pytest

from aggregator.service.app import create_app, open_store, start_site
from participant import CollectionSpec, Feature

ADMIN = "model-check-admin-token-0123456789"
MARKERS = 200


SPEC = CollectionSpec([Feature("tag", [f"t{i}" for i in range(MARKERS)])], ["a", "b"], "DE", 1.0)


def marker_report(i: int) -> dict:
    # Input 1 is the feature jointly with the class: value i (of 400) marks report i.
    return {"id": i.to_bytes(16, "big"), "spec": SPEC.fingerprint_digest, "input": 1, "value": i}


async def post(session, url, body):
    async with session.post(url, data=msgpack.packb(body), headers={"Content-Type": "application/msgpack"}) as r:
        assert r.status in (200, 201), await r.text()


@pytest.mark.parametrize("seed", range(4))
async def test_every_schedule_counts_each_report_once(database, seed):
    store, _ = await open_store(database, ADMIN)
    spec = SPEC
    collection = await store.create_collection("m", spec, 0)
    runner, base = await start_site(await create_app(store))
    url = f"{base}/collections/m/reports"
    rng = random.Random(seed)
    sent: set[int] = set()
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                action = rng.choice(["single", "replay", "batch", "concurrent"])
                if action == "single" or (action == "replay" and not sent):
                    i = rng.randrange(2 * MARKERS)
                    await post(session, url, marker_report(i))
                    sent.add(i)
                elif action == "replay":
                    await post(session, url, marker_report(rng.choice(sorted(sent))))
                elif action == "batch":
                    ids = [rng.randrange(2 * MARKERS) for _ in range(rng.randint(1, 12))]
                    ids += rng.sample(ids, k=min(3, len(ids)))  # duplicates inside the batch
                    await post(session, url, {"reports": [marker_report(i) for i in ids]})
                    sent.update(ids)
                else:
                    i = rng.randrange(2 * MARKERS)
                    copies = [post(session, url, marker_report(i)) for _ in range(rng.randint(2, 8))]
                    await asyncio.gather(*copies)
                    sent.add(i)
        state = (await store.statistics(collection)).states[1]
        expected = np.zeros(2 * MARKERS)
        expected[sorted(sent)] = 1
        np.testing.assert_array_equal(state.support, expected)
        assert state.n == len(sent) == await store.count_reports(collection)
    finally:
        await runner.cleanup()
        await store.close()



async def set_deadlock_timeout(url: str, timeout: str) -> None:
    """Every later session on ``url``'s database waits ``timeout`` before it looks for a deadlock."""
    import asyncpg

    admin = await asyncpg.connect(url)
    try:
        name = await admin.fetchval("SELECT current_database()")
        await admin.execute(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '{timeout}'")
    finally:
        await admin.close()


async def test_two_lanes_storing_the_same_reports_in_opposite_orders_do_not_deadlock(postgres):
    """Two write lanes store the same reports X and Y in opposite orders, as when devices re-send
    while their first requests are in flight, each lane held by another transaction keeping a
    row of its own (H_A, H_B) locked. Inserting in the order the reports came (X, H_A, Y and Y,
    H_B, X), lane A would hold X and lane B Y, each then waiting for the other's row: a
    deadlock, which PostgreSQL here (deadlock_timeout 60 s) would take a minute to break. The
    lanes insert in one order instead, so one waits for the other and both are answered as soon
    as the holds are let go: every report acknowledged, each counted once."""
    import asyncpg

    from aggregator.store import DUPLICATE, NEW, IncomingBatch
    from participant.wire import decode_values

    from .conftest import fresh_postgres_url

    url = fresh_postgres_url(postgres)
    await set_deadlock_timeout(url, '60s')
    store, _ = await open_store(url, ADMIN)
    blockers = [await asyncpg.connect(url) for _ in range(2)]
    try:
        collection = await store.create_collection("m", SPEC, 0)
        lane_a, lane_b = store.lanes()[:2]
        x, y, hold_a, hold_b = 1, 2, 3, 4

        def batch(markers):
            rows = decode_values(SPEC.oracles[1], markers, 1)[0]
            return IncomingBatch("m", 1, [i.to_bytes(16, "big") for i in markers], markers, rows)

        for blocker, held in zip(blockers, (hold_a, hold_b)):
            await blocker.execute("BEGIN")
            await blocker.execute(
                "INSERT INTO reports VALUES ($1, $2, 1, $3, 0)", collection.key, held.to_bytes(16, "big"), b"\x00"
            )
        a = asyncio.create_task(lane_a.ingest([batch([x, hold_a, y])]))
        b = asyncio.create_task(lane_b.ingest([batch([y, hold_b, x])]))
        async with asyncio.timeout(10):
            while await blockers[0].fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted") < 2:
                await asyncio.sleep(0.02)
        for blocker in blockers:
            await blocker.execute("ROLLBACK")
        async with asyncio.timeout(10):
            ((a,), (b,)) = await asyncio.gather(a, b)
        assert sorted([a.tolist(), b.tolist()]) == [[DUPLICATE, NEW, DUPLICATE], [NEW] * 3]
        state = (await store.statistics(collection)).states[1]
        expected = np.zeros(2 * MARKERS)
        expected[[x, y, hold_a, hold_b]] = 1
        np.testing.assert_array_equal(state.support, expected)
        assert state.n == 4 == await store.count_reports(collection)
    finally:
        for blocker in blockers:
            await blocker.close()
        await store.close()


async def test_a_transaction_rolled_back_to_break_a_deadlock_is_tried_again(postgres):
    """A lane inserting X and then a report H that another transaction holds waits for it; that
    transaction then inserts X too and waits for the lane: a deadlock, which the lane's session
    (deadlock_timeout 2 s against the other's 60 s) is the one to break, by rolling its
    transaction back. The lane tries it again once the other has ended: both reports acknowledged
    as new and counted once."""
    import asyncpg

    from aggregator.store import NEW, IncomingBatch
    from participant.wire import decode_values

    from .conftest import fresh_postgres_url

    url = fresh_postgres_url(postgres)
    await set_deadlock_timeout(url, '2s')
    store, _ = await open_store(url, ADMIN)
    other = await asyncpg.connect(url)
    try:
        collection = await store.create_collection("m", SPEC, 0)
        lane = store.lanes()[0]
        x, held = 1, 2

        def row(marker):
            return (collection.key, marker.to_bytes(16, "big"), b"\x00")

        await other.execute("SET deadlock_timeout = '60s'")
        await other.execute("BEGIN")
        await other.execute("INSERT INTO reports VALUES ($1, $2, 1, $3, 0)", *row(held))
        rows = decode_values(SPEC.oracles[1], [x, held], 1)[0]
        stored = asyncio.create_task(
            lane.ingest([IncomingBatch("m", 1, [i.to_bytes(16, "big") for i in (x, held)], [x, held], rows)])
        )
        async with asyncio.timeout(10):
            while await other.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted") < 1:
                await asyncio.sleep(0.02)
            # Waits until PostgreSQL rolls the lane's transaction back, then has X.
            await other.execute("INSERT INTO reports VALUES ($1, $2, 1, $3, 0)", *row(x))
        await other.execute("ROLLBACK")
        async with asyncio.timeout(10):
            (outcomes,) = await stored
        assert outcomes.tolist() == [NEW, NEW]
        state = (await store.statistics(collection)).states[1]
        expected = np.zeros(2 * MARKERS)
        expected[[x, held]] = 1
        np.testing.assert_array_equal(state.support, expected)
        assert state.n == 2 == await store.count_reports(collection)
    finally:
        await other.close()
        await store.close()


async def test_each_lane_writes_through_a_connection_of_its_own_and_close_gives_them_back(postgres):
    """A lane keeps its connection from one transaction to the next (two lanes never share one),
    instead of taking a pooled one each time: after three transactions on each of the two lanes,
    exactly two database sessions ran a report insert last (a pool hands its four connections
    round). Closing gives the held connections back, so the pool closes at once instead of
    waiting out its timeout (20 s here) for them."""
    from aggregator.store import IncomingBatch
    from participant.wire import decode_values

    from .conftest import fresh_postgres_url

    url = fresh_postgres_url(postgres)
    store, _ = await open_store(url, ADMIN, pool_size=4, timeout=20)
    loop = asyncio.get_running_loop()
    closing = None
    try:
        await store.create_collection("m", SPEC, 0)
        lanes = store.lanes()
        assert len(lanes) == 2
        for k in range(3):
            for j, lane in enumerate(lanes):
                marker = 2 * k + j
                rows = decode_values(SPEC.oracles[1], [marker], 1)[0]
                await lane.ingest([IncomingBatch("m", 1, [marker.to_bytes(16, "big")], [marker], rows)])
        inserting = await store._query(
            "fetchval",
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND query LIKE '%INSERT INTO reports%'",
        )
        assert inserting == 2
        closing = loop.time()
    finally:
        await store.close()
    assert closing is not None and loop.time() - closing < 10


async def test_a_lane_whose_connection_the_database_closed_while_idle_takes_a_fresh_one(postgres):
    """A lane keeps its connection between transactions, so the database may close it meanwhile
    (a restart, ``idle_session_timeout``, an administrator). The next write must not fail on it,
    as a write through the pool would not: the pool replaces a closed connection when handing it
    out, and so does the lane."""
    import asyncpg

    from aggregator.store import NEW, IncomingBatch
    from participant.wire import decode_values

    from .conftest import fresh_postgres_url

    url = fresh_postgres_url(postgres)
    store, _ = await open_store(url, ADMIN)
    try:
        await store.create_collection("m", SPEC, 0)
        (lane, *_) = store.lanes()

        def batch(marker):
            rows = decode_values(SPEC.oracles[1], [marker], 1)[0]
            return [IncomingBatch("m", 1, [marker.to_bytes(16, "big")], [marker], rows)]

        def gone(conn) -> bool:
            try:
                return conn.is_closed()
            except asyncpg.InterfaceError:  # asyncpg gave it back to the pool on closing
                return True

        await lane.ingest(batch(1))
        held = lane._conn
        await store._query("execute", "SELECT pg_terminate_backend($1)", held.get_server_pid())
        async with asyncio.timeout(10):
            while not gone(held):  # the closed socket reaches the client
                await asyncio.sleep(0.01)
        ((outcome,),) = await lane.ingest(batch(2))
        assert outcome == NEW
        assert (await store.statistics(await store.collection("m"))).states[1].n == 2
    finally:
        await store.close()


async def test_single_reports_are_decoded_with_the_batch_reports_of_their_commit(database):
    """A single report reaches the store undecoded (its row is built with the rest of its input's
    reports in the commit), beside a batch's decoded rows for the same input: both kinds are
    counted at their own values, in either order."""
    from aggregator.store import NEW, IncomingBatch
    from participant.wire import decode_values

    store, _ = await open_store(database, ADMIN)
    try:
        collection = await store.create_collection("m", SPEC, 0)

        def single(marker):
            return IncomingBatch("m", 1, [marker.to_bytes(16, "big")], [marker], None)

        def batch(markers):
            rows = decode_values(SPEC.oracles[1], markers, 1)[0]
            return IncomingBatch("m", 1, [i.to_bytes(16, "big") for i in markers], markers, rows)

        outcomes = await store.ingest([batch([3, 5]), single(7), single(11)])
        outcomes += await store.ingest([single(13), batch([17])])
        assert [o.tolist() for o in outcomes] == [[NEW, NEW], [NEW], [NEW], [NEW], [NEW]]
        expected = np.zeros(2 * MARKERS)
        expected[[3, 5, 7, 11, 13, 17]] = 1
        np.testing.assert_array_equal((await store.statistics(collection)).states[1].support, expected)
    finally:
        await store.close()
