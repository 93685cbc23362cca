"""What a ``serve`` process sets for itself once its app is up: everything loaded at start frozen
out of the garbage collector's sight, and its young generation run every 10,000 allocations, not
700 (``aggregator/garbage.py``), seen in the real process's own Prometheus figures."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from participant import Participant
from participant.wire import pack_report

from .conftest import table_1_spec
from .servers import AUTH, MSGPACK, Server

REPORTS = 20_000


def passes(metrics: str) -> float:
    """The collector's passes so far, all generations."""
    return sum(float(n) for n in re.findall(r'python_gc_collections_total\{generation="\d"\} (\S+)', metrics))


async def test_a_serving_process_rarely_runs_the_garbage_collector(tmp_path):
    """20,000 single reports, 64 in flight: the collector ran 37 passes with CPython's defaults (one
    of them over the whole heap, modules included) and none as served. In bench/ingest.py's load
    such passes cost 6 µs of a report's 80 µs of CPU, and a whole-heap pass held the loop 23 ms."""
    spec = table_1_spec()
    participant = Participant(spec)
    record = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "No"}
    queue = [pack_report(participant.report(record), spec) for _ in range(REPORTS)]
    server = Server(tmp_path / "gc.sqlite3").start()
    try:
        async with aiohttp.ClientSession() as session:
            body = {"spec": spec.to_dict(), "id": "c"}
            async with session.post(f"{server.url}/collections", json=body, headers=AUTH) as r:
                assert r.status == 201
            async with session.get(f"{server.url}/metrics") as r:
                before = passes(await r.text())

            async def sender():
                while queue:
                    async with session.post(f"{server.url}/collections/c/reports", data=queue.pop(), headers=MSGPACK) as r:
                        assert r.status == 201

            await asyncio.gather(*(sender() for _ in range(64)))
            async with session.get(f"{server.url}/metrics") as r:
                during = passes(await r.text()) - before
    finally:
        server.stop()
    assert during < 10
