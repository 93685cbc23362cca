"""No request waits on a collection's size, and every fault is answered in bounded time: a lock
another process holds on the SQLite file (503 within --db-timeout, named, the loop free), the
writer's deadline for identical requests, a request split across the writer's transactions, the
PostgreSQL row-by-row path failing midway, the body limit in bytes, a busy port, connection slots
by prefix, and a published spec served once with an ETag."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys

import aiohttp
import msgpack
import pytest

from aggregator.service.app import create_app, open_store, start_site
from participant.serving import network_of
from aggregator.service.keys import Config
from aggregator.store.postgres import PostgresStore
from participant import CollectionSpec, Feature

from .conftest import table_1_spec
from .test_service import ADMIN, AUTH, MSGPACK
from .test_service import wire as wire_of

SPEC = table_1_spec(protocol="DE")


def wire(**fields) -> dict:
    """A report of :data:`SPEC` on the wire."""
    return wire_of(spec=SPEC, **fields)


@pytest.fixture
async def locked_service(tmp_path):
    """A SQLite service with --db-timeout 1, and a function that holds the file's write lock from
    another connection (as another process would) until released."""
    db = str(tmp_path / "locked.sqlite3")
    store, _ = await open_store(db, ADMIN, timeout=1.0)
    app = await create_app(store, Config(db_timeout=1.0))
    runner, url = await start_site(app)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections", json={"spec": SPEC.to_dict(), "id": "c1", "min_reports": 0}, headers=AUTH) as r:
            assert r.status == 201
        yield url, session, db, app
    await runner.cleanup()
    await store.close()


def batch(first: int, count: int, input_index: int = 1) -> bytes:
    return msgpack.packb({"reports": [wire(report_id=(first + j).to_bytes(16, "big"), input=input_index, value=j % 6)
                                      for j in range(count)]})  # fmt: skip


async def test_a_lock_held_by_another_process_is_answered_503_within_the_timeout_naming_it(locked_service):
    url, session, db, app = locked_service
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    errors: list = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
    try:
        first = asyncio.ensure_future(session.post(f"{url}/collections/c1/reports", data=batch(0, 5), headers=MSGPACK))
        await asyncio.sleep(0.2)
        # Two identical requests queue behind it (a device re-sending while the first is in flight):
        # each has its own deadline, kept by identity.
        again = [asyncio.ensure_future(session.post(f"{url}/collections/c1/reports", data=batch(100, 5), headers=MSGPACK))
                 for _ in range(2)]  # fmt: skip
        # The loop stays free while the writes wait: health probes are answered before the writes'
        # 503s (a wait on the loop's thread would answer them after), counted, not timed.
        answered_while_waiting = 0
        while not first.done() or not all(a.done() for a in again):
            async with session.get(f"{url}/healthz") as r:
                await r.read()
            answered_while_waiting += not first.done()
            await asyncio.sleep(0.05)
        async with session.get(f"{url}/healthz") as r:
            health = await r.json()
        answers = [await first, *[await a for a in again]]
        bodies = [await a.json() for a in answers]
        assert [a.status for a in answers] == [503] * 3, bodies
        assert "locked by another process" in bodies[0]["error"]
        assert answered_while_waiting >= 2, answered_while_waiting  # the loop stayed free
        assert health == {"status": "unavailable", "reason": "the database is locked by another process"}
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert errors == []  # no exception in a timer callback
    async with session.post(f"{url}/collections/c1/reports", data=batch(100, 5), headers=MSGPACK) as r:
        assert r.status == 200 and (await r.json())["accepted"] in (0, 5), await r.text()


async def test_a_request_crossing_the_writers_cap_is_split_and_each_report_answered_as_its_own(sqlite_service):
    """4,500 reports over three inputs (some ids twice): more than one transaction's 4,000; every
    report's outcome in its place, each counted once."""
    service = sqlite_service
    await service.create(SPEC)
    reports = [wire(report_id=i.to_bytes(16, "big"), input=1 + i % 3, value=i % 4) for i in range(4400)]
    reports += [dict(reports[i]) for i in range(0, 200, 2)]  # 100 sent twice in the one request
    status, data = await service.post("/collections/c1/reports", msgpack.packb({"reports": reports}))
    assert status == 200 and data["accepted"] == 4400 and data["duplicate"] == 100
    assert [r["status"] for r in data["results"][4400:]] == ["duplicate"] * 100
    assert await service.n_reports() == 4400 == await service.count()


async def test_a_postgresql_transaction_failing_midway_stores_none_of_it(postgres, monkeypatch):
    """The row-by-row path (a batch holding a duplicate) fails on its second input: nothing of the
    first input is stored or counted, and the same request sent again is counted once."""
    from .conftest import fresh_postgres_url

    db = fresh_postgres_url(postgres)
    store, _ = await open_store(db, ADMIN)
    runner, url = await start_site(await create_app(store))
    real, calls = PostgresStore._insert, []

    async def failing(self, conn, key, one, order, now):
        calls.append(one.input)
        if len(calls) == 2:
            raise RuntimeError("the link broke midway")
        return await real(self, conn, key, one, order, now)

    body = msgpack.packb({"reports": [wire(report_id=bytes([i]) * 16, input=1 + i % 2, value=i % 6) for i in range(10)]
                          + [wire(report_id=bytes([0]) * 16, input=1, value=0)]})  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/collections", json={"spec": SPEC.to_dict(), "id": "c1", "min_reports": 0}, headers=AUTH) as r:
                assert r.status == 201
            monkeypatch.setattr(PostgresStore, "_insert", failing)
            async with session.post(f"{url}/collections/c1/reports", data=body, headers=MSGPACK) as r:
                assert r.status >= 500
            collection = await store.collection("c1")
            assert len(calls) == 2 and await store.count_reports(collection) == 0
            assert (await store.statistics(collection)).n_reports == 0
            monkeypatch.setattr(PostgresStore, "_insert", real)
            async with session.post(f"{url}/collections/c1/reports", data=body, headers=MSGPACK) as r:
                assert r.status == 200 and (await r.json())["accepted"] == 10
            assert await store.count_reports(collection) == 10 == (await store.statistics(collection)).n_reports
    finally:
        await runner.cleanup()
        await store.close()


async def test_the_body_limit_is_counted_in_bytes(tmp_path):
    store, _ = await open_store(tmp_path / "limit.sqlite3", ADMIN)
    runner, url = await start_site(await create_app(store, Config(max_body_bytes=1000)))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/collections", json={"spec": SPEC.to_dict(), "id": "c1"}, headers=AUTH) as r:
                assert r.status == 201
            for size, expected in ((1000, 400), (1001, 413)):  # at the limit: read (and refused as msgpack); past it: 413
                async with session.post(f"{url}/collections/c1/reports", data=b"\xc1" * size, headers=MSGPACK) as r:
                    assert r.status == expected, (size, await r.text())
    finally:
        await runner.cleanup()
        await store.close()


def test_a_busy_port_is_one_line_and_creates_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = tmp_path / "never.sqlite3"
        result = subprocess.run([sys.executable, "-m", "aggregator", "serve", "--db", str(db), "--port", str(port)],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr
    assert not db.exists()  # no database, so no admin token made and lost


def test_connection_slots_group_peers_by_the_configured_prefix():
    hosts = [f"192.0.2.{i}" for i in (1, 2, 3, 4, 5)]
    assert {network_of(h) for h in hosts} == {"192.0.2.0/24"}  # the default: one office, one group
    assert len({network_of(h, (32, 64)) for h in hosts}) == 5  # --slot-prefix 32: each host its own
    assert network_of("2001:db8::1", (24, 48)) == "2001:db8::/48"
    assert network_of("::ffff:192.0.2.7", (16, 64)) == "192.0.0.0/16"


async def test_a_spec_is_served_encoded_once_with_an_etag(sqlite_service):
    service = sqlite_service
    wide = CollectionSpec([Feature(f"f{j}", [str(i) for i in range(50)]) for j in range(200)], ["a", "b"], "DE", 1.0)
    await service.create(wide, "wide")
    async with service.session.get(f"{service.url}/collections/wide") as r:
        first, etag = await r.read(), r.headers["ETag"]
    async with service.session.get(f"{service.url}/collections/wide", headers={"If-None-Match": etag}) as r:
        assert r.status == 304 and await r.read() == b""
    # Any tag listing this one matches (weak or among others); another uid (a cache that kept a
    # collection since recreated under the same id, at a fresh database) gets the whole answer.
    for listed in (f"W/{etag}", f'"{"0" * 32}", {etag}'):
        async with service.session.get(f"{service.url}/collections/wide", headers={"If-None-Match": listed}) as r:
            assert r.status == 304, listed
    for stale in (f'"{"0" * 32}"', etag[:-2] + '"', "*x"):
        async with service.session.get(f"{service.url}/collections/wide", headers={"If-None-Match": stale}) as r:
            assert r.status == 200 and await r.read() == first and r.headers["ETag"] == etag, stale
    async with service.session.get(f"{service.url}/collections/wide", headers={"Accept": "application/msgpack"}) as r:
        assert msgpack.unpackb(await r.read()) == json.loads(first)
    assert json.loads(first)["fingerprint"] == wide.fingerprint


async def test_a_model_is_gzipped_when_asked_and_built_once_for_both_formats(sqlite_service):
    import gzip

    service = sqlite_service
    spec = CollectionSpec([Feature(f"f{j}", [str(i) for i in range(50)]) for j in range(40)], ["a", "b"], "DE", 1.0)
    await service.create(spec, "m")
    url = f"{service.url}/collections/m/model"
    bodies = {}
    for encoding in ("identity", "gzip", "br, gzip;q=0.5", "gzip;q=0", "deflate"):
        async with service.session.get(url, headers={"Accept-Encoding": encoding}, auto_decompress=False) as r:
            assert r.status == 200 and "Accept-Encoding" in r.headers["Vary"]
            raw = await r.read()
            zipped = r.headers.get("Content-Encoding") == "gzip"
            assert zipped == (encoding in ("gzip", "br, gzip;q=0.5")), encoding
            bodies[encoding] = json.loads(gzip.decompress(raw) if zipped else raw)
            assert int(r.headers["Content-Length"]) == len(raw)
    assert all(body == bodies["identity"] for body in bodies.values())
    async with service.session.get(url, headers={"Accept": "application/msgpack"}) as r:
        assert msgpack.unpackb(await r.read()) == bodies["identity"]
    assert len(gzip.compress(json.dumps(bodies["identity"]).encode())) < len(json.dumps(bodies["identity"])) / 2


from .test_service import sqlite_service  # noqa: E402, F401 (the fixture)
