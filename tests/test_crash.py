"""Durability under SIGKILL, with one instance or several on one database: real servers receive
concurrent streams of single reports and batches (the same report ids sent to different
instances), and one of them is killed at random moments and restarted. Every report a client saw
acknowledged must be stored and counted, none twice, nothing counted that was not stored, and
the estimates every instance serves must equal a recomputation from the stored reports."""

import asyncio
import json
import random
import subprocess

import aiohttp
import msgpack
import numpy as np
import pytest

from aggregator.service.app import open_store
from participant import CollectionSpec, Feature

from .conftest import fresh_postgres_url
from .servers import AUTH, MSGPACK, Server

MARKERS = 3000  # joint domain 2·MARKERS: report i carries value i, so a double count shows as a 2


SPEC = CollectionSpec([Feature("tag", [f"t{i}" for i in range(MARKERS)])], ["a", "b"], "DE", 1.0)


def marker(i: int, spec: CollectionSpec = SPEC) -> dict:
    return {"id": i.to_bytes(16, "big"), "spec": spec.fingerprint_digest, "input": 1, "value": i}


async def stream(servers: list[Server], victim: int, kills: int, rng: random.Random) -> set[int]:
    """Stream markers at ``servers`` (singles and batches, ids shared between instances) while
    ``servers[victim]`` is killed and restarted ``kills`` times; returns the acknowledged ids."""
    spec = SPEC
    acked, unknown = set(), set()
    next_id = iter(range(2 * MARKERS))
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.post(
            f"{servers[0].url}/collections", json={"spec": spec.to_dict(), "id": "c"}, headers=AUTH
        ) as r:
            assert r.status == 201

        async def send(server: Server, ids: list[int]) -> None:
            body = marker(ids[0]) if len(ids) == 1 else {"reports": [marker(i) for i in ids]}
            try:
                async with session.post(
                    f"{server.url}/collections/c/reports", data=msgpack.packb(body), headers=MSGPACK
                ) as r:
                    answer = await r.read()
                    if r.status not in (200, 201):
                        unknown.update(ids)
                        return
                    if len(ids) > 1:
                        statuses = [x["status"] for x in json.loads(answer)["results"]]
                        assert set(statuses) <= {"accepted", "duplicate"}, statuses
                    acked.update(ids)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                unknown.update(ids)  # may or may not have been stored before the kill
                await asyncio.sleep(0.05)

        async def sender():
            while not stop.is_set():
                fresh = [i for i in (next(next_id, None) for _ in range(rng.choice([1, 1, 1, 5]))) if i is not None]
                if not fresh:
                    return
                # Some of what was sent before goes again, to another instance.
                again = rng.sample(sorted(acked), k=min(len(acked), rng.choice([0, 0, 2])))
                ids = fresh + again
                if len(servers) > 1 and rng.random() < 0.2:
                    # The same report to two instances at once.
                    await asyncio.gather(*(send(s, ids) for s in rng.sample(servers, 2)))
                else:
                    await send(rng.choice(servers), ids)

        senders = [asyncio.create_task(sender()) for _ in range(16)]
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            servers[victim].kill()
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            await asyncio.get_running_loop().run_in_executor(None, servers[victim].start)
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*senders)
        # Retry what was in doubt and replay some acknowledged reports: neither may double count.
        for i in sorted(unknown) + rng.sample(sorted(acked), k=min(50, len(acked))):
            async with session.post(
                f"{rng.choice(servers).url}/collections/c/reports", data=msgpack.packb(marker(i)), headers=MSGPACK
            ) as r:
                assert r.status in (200, 201)
                acked.add(i)
        estimates = []
        for server in servers:
            async with session.get(f"{server.url}/collections/c/estimates") as r:
                assert r.status == 200
                estimates.append((await r.json())["inputs"][1]["estimate"])
    return acked, estimates


async def check(db: str, acked: set[int], estimates: list) -> None:
    store, _ = await open_store(db)
    try:
        collection = await store.collection("c")
        stats = await store.statistics(collection)
        state = stats.states[1]
        expected = np.zeros(2 * MARKERS)
        expected[sorted(acked)] = 1
        np.testing.assert_array_equal(state.support, expected)  # all there, none twice
        assert state.n == len(acked) == await store.count_reports(collection)  # nothing unstored counted
        recomputed = await store.recompute_statistics(collection)
        for a, b in zip(stats.states, recomputed.states):
            assert a.n == b.n
            np.testing.assert_array_equal(a.support, b.support)
        truth = recomputed.estimated_counts()[1]
        for served in estimates:  # every instance serves the recomputation's numbers
            np.testing.assert_allclose(served, truth, rtol=1e-12)
    finally:
        await store.close()


def run(db: str, servers: list[Server], victim: int, kills: int, seed: int) -> None:
    for server in servers:
        server.start()
    try:
        acked, estimates = asyncio.run(stream(servers, victim, kills, random.Random(seed)))
    finally:
        for server in servers:
            server.stop()
    assert len(acked) > 300  # the stream really ran between the kills
    asyncio.run(check(db, acked, estimates))


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_acknowledged_reports_survive_sigkill_on_sqlite(tmp_path, loop):
    """On either event loop (``serve --loop``; uvloop is the default where installed)."""
    db = str(tmp_path / "crash.sqlite3")
    run(db, [Server(db, None, 1, "--loop", loop)], victim=0, kills=3, seed=7)


def test_three_instances_on_postgresql_with_one_killed_count_each_report_once(postgres):
    db = fresh_postgres_url(postgres)
    # Two single-process instances and one with two pre-forked workers; one single is killed.
    servers = [Server(db), Server(db), Server(db, None, 2)]
    run(db, servers, victim=0, kills=2, seed=11)


def test_a_second_process_on_one_sqlite_file_is_refused(tmp_path):
    db = str(tmp_path / "one.sqlite3")
    first = Server(db).start()
    try:
        second = Server(db)
        with pytest.raises(RuntimeError, match=rf"{db} is in use by process {first.proc.pid}") as refused:
            second.start()
        assert second.proc.returncode == 2 and "Traceback" not in str(refused.value)
        # Another name for the same file meets the same lock.
        link = tmp_path / "link.sqlite3"
        link.symlink_to(db)
        with pytest.raises(RuntimeError, match=rf"{db} is in use by process {first.proc.pid}"):
            Server(str(link)).start()
        many = subprocess.run(
            [*Server(str(tmp_path / "other.sqlite3"), None, 2).command()], capture_output=True, text=True, timeout=60
        )
        assert many.returncode == 2 and "--workers needs a PostgreSQL database" in many.stderr
        assert "Traceback" not in many.stderr
    finally:
        first.stop()


async def test_instances_share_collections_settings_and_statistics(postgres):
    """Two instances in one process on one PostgreSQL: a collection created on one is found on the
    other, the same id is 409 on both, and counts read on either include the other's reports."""
    import aiohttp

    from aggregator.service.app import create_app, start_site

    from .conftest import table_1_spec
    from .servers import ADMIN

    db = fresh_postgres_url(postgres)
    stores, runners, urls = [], [], []
    for _ in range(2):
        store, _ = await open_store(db, ADMIN)
        runner, url = await start_site(await create_app(store))
        stores.append(store), runners.append(runner), urls.append(url)
    try:
        spec = table_1_spec(protocol="DE")
        async with aiohttp.ClientSession() as session:
            body = {"spec": spec.to_dict(), "id": "shared", "min_reports": 0}
            async with session.post(f"{urls[0]}/collections", json=body, headers=AUTH) as r:
                assert r.status == 201
            for url in urls:
                async with session.post(f"{url}/collections", json=body, headers=AUTH) as r:
                    assert r.status == 409
                async with session.get(f"{url}/collections/shared") as r:
                    assert r.status == 200
            for j, url in enumerate(urls):
                async with session.post(
                    f"{url}/collections/shared/reports", data=msgpack.packb(marker(j, spec) | {"value": j}), headers=MSGPACK
                ) as r:
                    assert r.status == 201
            for url in urls:
                async with session.get(f"{url}/collections/shared/estimates") as r:
                    assert (await r.json())["reports"] == 2
    finally:
        for runner, store in zip(runners, stores):
            await runner.cleanup()
            await store.close()
