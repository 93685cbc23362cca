"""Durability under SIGKILL: a real server receiving a steady stream of reports is killed at random
moments and restarted. Every report the client saw acknowledged must be stored and counted, none
twice, and the running statistics must equal a recomputation from the stored reports."""

import asyncio
import random
import signal
import socket
import subprocess
import sys

import aiohttp
import msgpack
import numpy as np

from aggregator.store import Store
from participant import CollectionSpec, Feature

ADMIN = "crash-test"
MARKERS = 3000  # joint domain 2·MARKERS: report i carries value i, so a double count shows as a 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(db, port) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "aggregator", "serve", "--db", str(db), "--port", str(port), "--admin-token", ADMIN],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert "listening on" in proc.stdout.readline()
    return proc


def report(i: int) -> bytes:
    return msgpack.packb({"id": i.to_bytes(16, "big"), "input": 1, "value": i})


async def run(db, port, kills: int, rng: random.Random):
    url = f"http://127.0.0.1:{port}"
    proc = start(db, port)
    spec = CollectionSpec([Feature("tag", [f"t{i}" for i in range(MARKERS)])], ["a", "b"], "DE", 1.0)
    acked, unknown = set(), set()
    counter = iter(range(2 * MARKERS))
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.post(
            f"{url}/collections", json={"spec": spec.to_dict(), "id": "c"}, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as r:
            assert r.status == 201

        async def sender():
            while not stop.is_set():
                i = next(counter, None)
                if i is None:
                    return
                try:
                    async with session.post(
                        f"{url}/collections/c/reports", data=report(i), headers={"Content-Type": "application/msgpack"}
                    ) as r:
                        await r.read()
                        (acked if r.status in (200, 201) else unknown).add(i)
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    unknown.add(i)  # may or may not have been stored before the kill
                    await asyncio.sleep(0.05)

        senders = [asyncio.create_task(sender()) for _ in range(16)]
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            proc = await asyncio.get_running_loop().run_in_executor(None, start, db, port)
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*senders)
        # Retry what was in doubt and replay some acknowledged reports: neither may double count.
        for i in sorted(unknown) + rng.sample(sorted(acked), k=min(50, len(acked))):
            async with session.post(
                f"{url}/collections/c/reports", data=report(i), headers={"Content-Type": "application/msgpack"}
            ) as r:
                assert r.status in (200, 201)
                acked.add(i)
    proc.terminate()
    proc.wait()
    return acked


def test_acknowledged_reports_survive_sigkill(tmp_path):
    db = tmp_path / "crash.sqlite3"
    acked = asyncio.run(run(db, free_port(), kills=3, rng=random.Random(7)))
    assert len(acked) > 300  # the stream really ran between the kills
    store = Store(db)
    try:
        state = store.statistics["c"].states[1]
        expected = np.zeros(2 * MARKERS)
        expected[sorted(acked)] = 1
        np.testing.assert_array_equal(state.support, expected)  # all there, none twice
        assert state.n == len(acked) == store.count_reports("c")
        recomputed = store.recompute_statistics("c")
        for a, b in zip(store.statistics["c"].states, recomputed.states):
            assert a.n == b.n
            np.testing.assert_array_equal(a.support, b.support)
    finally:
        store.close()
