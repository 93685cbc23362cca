"""Faults of the database and the network under load: nothing acknowledged is lost, nothing counted twice.

Two real ``serve`` instances reach their own PostgreSQL through a TCP proxy of this test. While
clients stream marker reports (report ``i`` carries the value ``i``, so a double count shows as a
2) and re-send each until it is acknowledged, the test, seeded, in turn: cuts connections and drops
PostgreSQL's replies at random points (a commit may land with its answer lost), restarts PostgreSQL
fast and then immediately (a crash, with recovery), freezes the link past the instances' database
timeout, and takes every connection slot while cutting the instances' own. Every answer must be an
acknowledgement or a 503 with Retry-After, never a 500; afterwards the reports table must hold
exactly the acknowledged reports, and every instance must count each once. The collection is the
largest the default limits admit (10^6 statistics entries).
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import aiohttp
import asyncpg
import msgpack
import numpy as np

from aggregator.service.app import open_store
from participant import CollectionSpec, Feature

from .postgres import PostgreSQL, server_directory
from .servers import AUTH, MSGPACK, Server

MARKERS = 8000
# Each client sends at most one request per PACE seconds, so that the load lasts through every fault
# (about 20 s of markers) however fast the instances ingest.
PACE = 0.05
CHAOS_SECONDS = 6.0
# The largest collection the default --max-state admits (999,998 entries): what a report costs and
# what a fault leaves must not depend on the collection's size. Markers use the first values.
DOMAIN = 499_999
SPEC = CollectionSpec([Feature("tag", [f"t{i}" for i in range(DOMAIN)])], ["a", "b"], "DE", 1.0)
DB_TIMEOUT = 1.5  # the instances' --db-timeout: a frozen link answers 503 after this, not after 60 s


def marker(i: int) -> dict:
    return {"id": i.to_bytes(16, "big"), "spec": SPEC.fingerprint_digest, "input": 1, "value": i}


# PostgreSQL's ReadyForQuery message with its length (5): sent after a statement sent on its own has
# committed, or after any transaction's end (protocol, "Message Formats").
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


class Proxy:
    """TCP on 127.0.0.1 to PostgreSQL's Unix socket, which can cut connections, drop replies and freeze."""

    def __init__(self, socket_path: str, rng: random.Random):
        self.socket_path, self.rng = socket_path, rng
        self.chaos = 0.0  # per forwarded chunk: the chance of a cut (half of them swallowing a reply)
        self.frozen = False
        self.refusing = False  # new links are cut at once (while the test takes PostgreSQL's slots)
        # The next query holding these bytes (a report's id) reaches PostgreSQL and is done there;
        # its answer is lost (see _pipe).
        self.lose_reply_to: bytes | None = None
        self.links: set[asyncio.StreamWriter] = set()
        self.cuts = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def cut_all(self) -> None:
        for writer in list(self.links):
            writer.transport.abort()
        self.cuts += len(self.links)

    async def _link(self, reader, writer) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError:
            writer.transport.abort()
            return
        self.links |= {writer, up_writer}
        losing = asyncio.Event()  # set once this link carried the query whose answer is to be lost
        pipes = [
            asyncio.ensure_future(p)
            for p in (self._pipe(reader, up_writer, writer, arm=losing), self._pipe(up_reader, writer, up_writer, lose=losing))
        ]
        try:
            # When either side closes, both go: a half-open link would hold the other end forever.
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            self.links -= {writer, up_writer}
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pipe(self, source, target, other, arm: asyncio.Event | None = None, lose: asyncio.Event | None = None) -> None:
        """Forwards ``source`` to ``target``. ``arm`` (client to PostgreSQL) is set when a query
        holds :attr:`lose_reply_to`; from then on, ``lose`` (PostgreSQL to client) forwards
        nothing and cuts the link once PostgreSQL says it is ready for the next query: the
        write, its commit included, is done, and its answer never arrives."""
        held = b""
        try:
            while data := await source.read(65536):
                while self.frozen:
                    await asyncio.sleep(0.05)
                if self.chaos and self.rng.random() < self.chaos:
                    # Cut now: this chunk (a query, or PostgreSQL's answer to one) never arrives.
                    self.cuts += 1
                    target.transport.abort()
                    other.transport.abort()
                    return
                if lose is not None and lose.is_set():
                    held += data
                    if READY_FOR_QUERY in held:
                        self.cuts += 1
                        target.transport.abort()
                        other.transport.abort()
                        return
                    continue
                if arm is not None and self.lose_reply_to is not None and self.lose_reply_to in data:
                    self.lose_reply_to = None
                    arm.set()
                target.write(data)
                await target.drain()
        except (ConnectionError, OSError):
            pass


async def load(urls: list[str], rng: random.Random, stop: asyncio.Event, answers: list) -> set[int]:
    """Clients sending singles and small batches, each re-sent until acknowledged; returns the
    acknowledged ids. ``answers`` collects every non-2xx answer's (status, Retry-After, error)."""
    acked: set[int] = set()
    fresh = iter(range(MARKERS))

    async def client(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            ids = [i for i in (next(fresh, None) for _ in range(rng.choice([1, 1, 1, 4]))) if i is not None]
            if not ids:
                return
            body = msgpack.packb(marker(ids[0]) if len(ids) == 1 else {"reports": [marker(i) for i in ids]})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    async with session.post(
                        f"{rng.choice(urls)}/collections/c/reports", data=body, headers=MSGPACK
                    ) as r:
                        if r.status in (200, 201):
                            answer = json.loads(await r.read())
                            if len(ids) > 1:
                                assert {x["status"] for x in answer["results"]} <= {"accepted", "duplicate"}, answer
                            acked.update(ids)
                            await asyncio.sleep(PACE)
                            break
                        answers.append((r.status, r.headers.get("Retry-After"), (await r.json()).get("error")))
                except (aiohttp.ClientError, TimeoutError, OSError):
                    pass
                await asyncio.sleep(0.05)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        await asyncio.gather(*(client(session) for _ in range(12)))
    return acked


async def healthz_latency(url: str) -> tuple[int, float]:
    start = time.monotonic()
    async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(30)) as r:
        return r.status, time.monotonic() - start


async def exhaust(pg: PostgreSQL, limit: int) -> list:
    """Take every connection slot PostgreSQL has (its superuser reserve included)."""
    held = []
    while len(held) < limit:
        try:
            held.append(await asyncpg.connect(pg.url(), timeout=5))
        except (asyncpg.TooManyConnectionsError, asyncpg.CannotConnectNowError, OSError):
            break
    return held


async def starve(pg: PostgreSQL, proxy) -> list:
    """Every connection slot held by the test and none by the instances: cut their connections and
    take the slots their backends free, until PostgreSQL has no client but the test. Meanwhile the
    proxy refuses the instances' new links (under load they reconnect faster than the test takes a
    freed slot); once the test holds every slot it lets them try again, into a full database."""
    held: list = []
    proxy.refusing = True
    try:
        for _ in range(50):
            proxy.cut_all()
            await asyncio.sleep(0.1)
            held += await exhaust(pg, 200 - len(held))
            if held:
                others = await held[0].fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                    "AND NOT pid = ANY($1::int[])",
                    [c.get_server_pid() for c in held],
                )
                if others == 0:
                    return held
    finally:
        proxy.refusing = False
    raise AssertionError("the instances kept a connection slot")


async def create_collection(session: aiohttp.ClientSession, url: str) -> None:
    """Create collection ``c`` as an operator would: a 503 (the database slower than the instance's
    short ``--db-timeout`` on a busy machine) is retried; a 409 after a 503 means the first try
    was committed. Any other answer fails the test."""
    refused = False
    for _ in range(60):
        async with session.post(f"{url}/collections", json={"spec": SPEC.to_dict(), "id": "c"}, headers=AUTH) as r:
            if r.status == 201 or (r.status == 409 and refused):
                return
            assert r.status == 503, (r.status, await r.text())
            refused = True
        await asyncio.sleep(0.5)
    raise AssertionError("the collection was refused with 503 for 30 s")


async def scenario(pg: PostgreSQL, db: str, seed: int) -> tuple[set[int], list, dict, list[list[float]]]:
    """Run the load through every fault; returns the acknowledged ids, the non-2xx answers, what
    the faults did (cuts, slots held, /healthz during the freeze and the exhaustion) and each
    instance's served estimates."""
    rng = random.Random(seed)
    proxy = Proxy(f"{pg.socket_dir}/.s.PGSQL.5432", rng)
    port = await proxy.start()
    via_proxy = f"postgresql://postgres@127.0.0.1:{port}/{db}?sslmode=disable"
    options = ("--db-timeout", str(DB_TIMEOUT), "--db-pool", "3")
    servers = [Server(via_proxy, None, 1, *options), Server(via_proxy, None, 1, *options)]
    loop = asyncio.get_running_loop()
    for server in servers:
        await loop.run_in_executor(None, server.start)
    urls = [s.url for s in servers]
    answers: list = []
    seen: dict = {}
    try:
        async with aiohttp.ClientSession() as session:
            await create_collection(session, urls[0])
        stop = asyncio.Event()
        streaming = asyncio.create_task(load(urls, rng, stop, answers))

        await asyncio.sleep(1.0)
        proxy.chaos = 0.03  # cuts and lost replies at random points
        await asyncio.sleep(CHAOS_SECONDS)
        proxy.chaos = 0.0
        seen["cuts"] = proxy.cuts

        await asyncio.sleep(0.5)
        await loop.run_in_executor(None, pg.restart, "fast")
        await asyncio.sleep(1.0)
        await loop.run_in_executor(None, pg.restart, "immediate")
        await asyncio.sleep(1.0)

        proxy.frozen = True  # the link hangs: every instance must answer within its timeout
        seen["frozen_healthz"] = await asyncio.gather(*(healthz_latency(u) for u in urls))
        await asyncio.sleep(0.5)
        proxy.frozen = False
        proxy.cut_all()

        held = await starve(pg, proxy)  # the instances must reconnect, and cannot
        seen["held"] = len(held)
        seen["exhausted_healthz"] = await asyncio.gather(*(healthz_latency(u) for u in urls))
        await asyncio.sleep(1.0)
        for conn in held:
            await conn.close()

        await asyncio.sleep(1.0)
        stop.set()
        acked = await asyncio.wait_for(streaming, 120)
        estimates = []
        async with aiohttp.ClientSession() as session:
            for url in urls:
                async with session.get(f"{url}/collections/c/estimates") as r:
                    assert r.status == 200
                    estimates.append((await r.json())["inputs"][1]["estimate"])
    finally:
        for server in servers:
            if server.proc is not None and server.proc.poll() is None:
                server.proc.terminate()
                seen.setdefault("logs", []).append(server.proc.communicate(timeout=15)[1])
            server.stop()
        proxy.server.close()
    return acked, answers, seen, estimates


def test_nothing_acknowledged_is_lost_or_counted_twice_under_database_and_network_faults():
    with server_directory("faults") as directory:
        pg = PostgreSQL(directory, max_connections=20, superuser_reserved_connections=2).start()
        try:
            db = "faults"
            pg.create_database(db)
            acked, answers, seen, estimates = asyncio.run(scenario(pg, db, seed=11))
            asyncio.run(check(pg.url(db), acked, estimates))
        finally:
            pg.stop("fast")
    assert len(acked) > 1000  # the load really ran through the faults
    assert seen["cuts"] >= 10  # the proxy really cut connections and dropped replies
    assert seen["held"] >= 15  # the slots really ran out
    # Under every fault: acknowledged, or 503 saying when to retry (and what became of the report).
    assert answers, "no fault reached a client"
    errors = "\n".join(log[log.find("unhandled error"):][:4000] for log in seen["logs"] if "unhandled error" in log)
    assert {status for status, _, _ in answers} == {503}, ([a for a in answers if a[0] != 503][:5], errors[-3000:])
    assert all(retry for _, retry, _ in answers)
    assert any("may have been stored" in error for _, _, error in answers)
    assert not any("127.0.0.1" in error or "postgres" in error for _, _, error in answers)  # nothing internal
    for status, latency in seen["frozen_healthz"] + seen["exhausted_healthz"]:
        assert status == 503 and latency < DB_TIMEOUT + 2.0, (status, latency)


async def check(db: str, acked: set[int], estimates: list[list[float]]) -> None:
    store, _ = await open_store(db)
    try:
        collection = await store.collection("c")
        stored = {int.from_bytes(rid, "big") for rid, in await store.pool.fetch(
            "SELECT report_id FROM reports WHERE collection = $1", collection.key)}  # fmt: skip
        assert stored == acked  # nothing acknowledged missing (and clients re-sent until acknowledged)
        stats = await store.statistics(collection)
        expected = np.zeros(2 * DOMAIN)
        expected[sorted(stored)] = 1
        np.testing.assert_array_equal(stats.states[1].support, expected)  # every stored report counted once
        assert stats.n_reports == len(stored)
        truth = (await store.recompute_statistics(collection)).estimated_counts()[1]
        for served in estimates:
            np.testing.assert_allclose(served, truth, rtol=1e-12)
    finally:
        await store.close()


# Faults named right: a database that refuses writes or holds them is a 503 with Retry-After, and
# /healthz says so, within the --db-timeout, whatever held the write.

NAMED_TIMEOUT = 1.0


async def timed_post(session, url: str, body: bytes) -> tuple[int, dict, float, str | None]:
    start = time.monotonic()
    async with session.post(f"{url}/collections/c/reports", data=body, headers=MSGPACK) as r:
        return r.status, json.loads(await r.read()), time.monotonic() - start, r.headers.get("Retry-After")


async def named_faults(pg: PostgreSQL, db: str) -> dict:
    proxy = Proxy(f"{pg.socket_dir}/.s.PGSQL.5432", random.Random(3))
    port = await proxy.start()
    url = f"postgresql://postgres@127.0.0.1:{port}/{db}?sslmode=disable"
    server = Server(url, None, 1, "--db-timeout", str(NAMED_TIMEOUT), "--db-pool", "3")
    await asyncio.get_running_loop().run_in_executor(None, server.start)
    found: dict = {}
    admin = await asyncpg.connect(pg.url(db))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await create_collection(session, server.url)
            # A read-only database (as a standby is, or with default_transaction_read_only).
            await admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            await admin.execute("SELECT pg_reload_conf()")
            await asyncio.sleep(0.5)
            found["read_only_healthz"] = await healthz_latency(server.url)  # before any write fails
            found["read_only_post"] = await timed_post(session, server.url, msgpack.packb(marker(1)))
            await admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
            await admin.execute("SELECT pg_reload_conf()")
            await asyncio.sleep(2 * NAMED_TIMEOUT + 0.5)  # the refusal ages out of /healthz
            found["writable_again"] = await timed_post(session, server.url, msgpack.packb(marker(1)))
            found["healthy_again"] = await healthz_latency(server.url)
            # A lock held on the reports table past the timeout.
            lock = await asyncpg.connect(pg.url(db))
            transaction = lock.transaction()
            await transaction.start()
            await lock.execute("LOCK TABLE reports IN ACCESS EXCLUSIVE MODE")
            post = asyncio.create_task(timed_post(session, server.url, msgpack.packb(marker(2))))
            await asyncio.sleep(NAMED_TIMEOUT + 0.3)  # the write held past the timeout: /healthz says so
            found["locked_healthz"] = await healthz_latency(server.url)
            found["locked_post"] = await post
            await transaction.rollback()
            await lock.close()
            for _ in range(20):  # the device re-sends until acknowledged: counted once
                found["after_lock"] = await timed_post(session, server.url, msgpack.packb(marker(2)))
                if found["after_lock"][0] in (200, 201):
                    break
                await asyncio.sleep(0.5)
            # A write sent whose answer is lost: stored, and the device is told it may have been.
            proxy.lose_reply_to = marker(4)["id"]
            found["lost_reply_post"] = await timed_post(session, server.url, msgpack.packb(marker(4)))
            for _ in range(20):
                found["after_lost_reply"] = await timed_post(session, server.url, msgpack.packb(marker(4)))
                if found["after_lost_reply"][0] in (200, 201):
                    break
                await asyncio.sleep(0.5)
            # A frozen link.
            await asyncio.sleep(2 * NAMED_TIMEOUT)
            proxy.frozen = True
            found["frozen_post"], found["frozen_healthz"] = await asyncio.gather(
                timed_post(session, server.url, msgpack.packb(marker(3))), healthz_latency(server.url)
            )
            proxy.frozen = False
            proxy.cut_all()
        found["stored"] = sorted(
            int.from_bytes(r["report_id"], "big") for r in await admin.fetch("SELECT report_id FROM reports")
        )
    finally:
        await admin.close()
        server.proc.terminate()
        found["log"] = server.proc.communicate(timeout=15)[1]
        server.stop()
        proxy.server.close()
    return found


def test_a_database_that_refuses_or_holds_writes_is_a_503_named_within_the_timeout():
    with server_directory("named") as directory:
        pg = PostgreSQL(directory).start()
        try:
            pg.create_database("named")
            found = asyncio.run(named_faults(pg, "named"))
        finally:
            pg.stop("fast")
    # Without the timeout a held write waits for ever (the client gives up at 30 s); with it the
    # answer comes after NAMED_TIMEOUT, plus whatever a busy machine adds: a wide margin, well under 30.
    bound = NAMED_TIMEOUT + 10.0
    status, answer, seconds, retry = found["read_only_post"]
    assert status == 503 and retry and "read-only" in answer["error"] and "nothing was stored" in answer["error"]
    assert found["read_only_healthz"][0] == 503 and found["read_only_healthz"][1] < bound
    assert found["writable_again"][0] == 201 and found["healthy_again"][0] == 200
    for name in ("locked_post", "frozen_post"):
        status, answer, seconds, retry = found[name]
        assert status == 503 and retry and seconds < bound, (name, found[name])
    for name in ("locked_healthz", "frozen_healthz"):
        assert found[name][0] == 503 and found[name][1] < bound, (name, found[name])
    assert found["after_lock"][0] in (200, 201)
    status, answer, seconds, retry = found["lost_reply_post"]
    assert status == 503 and retry and "may have been stored" in answer["error"], found["lost_reply_post"]
    assert found["after_lost_reply"][:2] == (200, {"status": "duplicate"}), found["after_lost_reply"]
    # The held report and the one whose commit answer was lost, re-sent, each stored once; the
    # frozen one never acknowledged.
    assert found["stored"] == [1, 2, 4]
    assert "Traceback" not in found["log"] and "unhandled error" not in found["log"]
