"""The shuffler shows nothing that depends on whose a report is, tried by a party playing the
aggregator against real processes on loopback: a real aggregator behind a proxy that records every
batch and may withhold its answer, a real shuffler (its store SQLite or PostgreSQL), real devices.

The principle (docs/trust.md): whatever the shuffler shows anyone, now or later (its answers and
their timing, every count, its files), is the same whether a report was a person's or a dummy, and
carries nothing of arrival order beyond the release schedule. So the tests check properties rather
than attacks one by one:

- everything anyone may ask of a collection (its progress, the views, its view, health) answers
  the same bytes after each report arrives as before it, until a release;
- every report of a forwarded batch, re-posted, hears the same answer, a person's or a dummy's,
  acknowledged by the aggregator or withheld, and after a close the same refusal: the flooding
  aggregator of the review, which found its target 8 times of 8, is left with chance;
- after a release, the store's files hold the released reports and their digests in no order that
  follows their arrival, and the log is empty, whether or not the aggregator answered;
- a report that could never be stored is refused before the waiting cap is looked at;
- slow clients (the review's slowloris) hold no reading capacity and no connection slot that
  another party needs: a report to another collection is still taken at once.

The downgrade to a direct report, and a view below the app's floor or dummies, are refused by the
devices (tests/test_device_downgrade.py); a device told its own uid or key, a floor lowered for the
shuffler, junk and refused batches are last round's attacks (tests/test_shuffled_guarantee.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import socket
import sqlite3
import time
import urllib.error
from contextlib import closing
import urllib.request

import aiohttp
import msgpack
import numpy as np
import pytest
from scipy import stats

from participant import AsyncClient
from participant.view import ShuffledView

from .hostile import Proxy
from .servers import Server, ShufflerProcess, token_file
from .test_shuffled_guarantee import post, sealed_under
from .test_shuffler import RECORD, call, create, wait_for

SEALED = {"Content-Type": "application/ldpnb-sealed"}


def answer(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None) -> tuple:
    """Everything an HTTP answer shows but its date: (status, headers, body)."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as got:
            status, head, data = got.status, got.headers, got.read()
    except urllib.error.HTTPError as refused:
        status, head, data = refused.code, refused.headers, refused.read()
    return status, tuple(sorted((k, v) for k, v in head.items() if k.lower() != "date")), data


def observed(shuffler: str, cid: str) -> list[tuple]:
    """What anyone may ask the shuffler of collection ``cid`` without posting: its progress, every
    view, its view, its health."""
    return [answer(f"{shuffler}{path}") for path in (f"/collections/{cid}", "/views", f"/collections/{cid}/view", "/healthz")]


def reposted(shuffler: str, cid: str, reports: list[bytes]) -> list[tuple]:
    """The shuffler's answer to each of ``reports`` posted again, one by one."""
    return [answer(f"{shuffler}/collections/{cid}/reports", "POST", r, SEALED) for r in reports]


def post_all(shuffler: str, cid: str, reports: list[bytes]) -> None:
    """Post ``reports`` as one msgpack batch; every one must be accepted."""
    request = urllib.request.Request(f"{shuffler}/collections/{cid}/reports", data=msgpack.packb({"reports": reports}),
                                     method="POST", headers={"Content-Type": "application/msgpack"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as got:
        assert got.status == 200 and b'"accepted": %d' % len(reports) in got.read()


@pytest.fixture(scope="module")
def shared_aggregator(tmp_path_factory):
    """One real aggregator for this module's tests (starting one costs about a second of CPU);
    each creates collections under ids of its own (:func:`fresh_id`)."""
    server = Server(tmp_path_factory.mktemp("shared") / "aggregator.sqlite3").start()
    yield server
    server.stop()


@pytest.fixture
def aggregator(shared_aggregator, tmp_path):
    """A real aggregator: ``(server, token)``, the token its shuffler presents (in ``tmp_path / "token.txt"``)."""
    return shared_aggregator, token_file(tmp_path / "token.txt")


_ids = itertools.count()


def fresh_id() -> str:
    """A collection id no other test on the shared aggregator has used."""
    return f"c{next(_ids)}"


async def test_a_flooding_aggregator_replaying_a_batch_is_left_with_chance(aggregator, database, tmp_path):
    """The review's attack: the aggregator fills a batch with 99 reports of its own and waits for
    one person's; the shuffler's default dummies (as many as the floor) join them. Nothing anyone
    may ask changes as reports arrive, and once the batch is forwarded every one of its 200
    reports, re-posted, hears the very same answer: the target's answer is its 100 dummies'
    answer, so the aggregator finds it with probability 1/101, not 8 times of 8. After a close,
    every re-post hears the same refusal. (SQLite and PostgreSQL stores: their dedup differs.)"""
    server, token = aggregator
    cid = fresh_id()
    store = database if database.startswith("postgres") else str(tmp_path / "shuffler.sqlite3")
    async with Proxy(server.url) as front:
        shuffler = ShufflerProcess(store, front.url, tmp_path / "token.txt", "--interval", "0.3", "--per-address", "0").start()
        try:
            create(server, cid, shuffler.url, token, min_batch=100)  # the spec asks for no dummies
            view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/{cid}/view"))
            assert (view.min_batch, view.dummies) == (100, 100)  # the shuffler's default: as many as the floor
            before = await asyncio.to_thread(observed, shuffler.url, cid)
            own = [sealed_under(view) for _ in range(99)]
            await asyncio.to_thread(post_all, shuffler.url, cid, own)
            assert await asyncio.to_thread(observed, shuffler.url, cid) == before
            async with AsyncClient(front.url, ledger=tmp_path / "target.json", pace=0.001, shuffler=shuffler.url) as device:
                assert await device.submit(cid, RECORD) == "accepted"  # a device under the default limits
            await asyncio.to_thread(wait_for, lambda: call(f"{shuffler.url}/collections/{cid}")["forwarded"] == 100)
            batch = front.batches[0]["reports"]
            assert len(batch) == 200 and front.batches[0]["dummies"] == 100
            others = [r for r in batch if r not in set(own)]
            assert len(others) == 101  # the target and the dummies
            answers = await asyncio.to_thread(reposted, shuffler.url, cid, batch)
            assert len(set(answers)) == 1 and answers[0][0] == 200, set(answers)
            # The aggregator's best guess is any report whose answer is the target's: 101 of them.
            target_like = [r for r, a in zip(batch, answers) if r in others and a == answers[batch.index(others[0])]]
            assert len(target_like) == 101
            # Re-posted, nothing was taken again: no second batch, the same people forwarded.
            await asyncio.sleep(1.0)
            assert len(front.batches) == 1 and call(f"{shuffler.url}/collections/{cid}")["forwarded"] == 100
            closing = answer(f"{shuffler.url}/collections/{cid}/close", "POST", b'{"pad": true}',
                             {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})  # fmt: skip
            assert closing[0] == 200, closing
            after = await asyncio.to_thread(reposted, shuffler.url, cid, batch)
            assert len(set(after)) == 1 and after[0][0] == 410
        finally:
            shuffler.stop()


def arrival_runs(order: list[int], length: int = 4) -> int:
    """How many items of ``order`` (arrival indices, in the order found) lie in runs of at least
    ``length`` consecutive arrivals, rising or falling (i, i+1, i+2, ... or i, i-1, ...: SQLite
    fills a page from its end, so rows written in turn lie in falling order)."""
    counted = 0
    for step in (1, -1):
        run = 1
        for a, b in zip(order, order[1:] + [None]):
            if b is not None and b == a + step:
                run += 1
                continue
            counted += run if run >= length else 0
            run = 1
    return counted


def no_arrival_order(order: list[int], what: str) -> None:
    """Fail when ``order`` (arrival indices, as found in the files) follows arrival more than a
    uniformly random order does: Kendall's tau, and the review's statistic (items in runs of four
    or more consecutive arrivals, :func:`arrival_runs`) against 10,000 random orders, each at p
    0.0002 (a false alarm in about one run of 2,500)."""
    tau = stats.kendalltau(np.arange(len(order)), order)
    assert tau.pvalue > 2e-4, f"{what}: tau {tau.statistic:.3f} (p {tau.pvalue:.2g}) over {len(order)}"
    rng = np.random.default_rng(0)
    found = arrival_runs(order)
    random = arrival_runs_of_rows(np.array([rng.permutation(len(order)) for _ in range(10_000)]))
    assert np.mean(random >= found) > 2e-4, f"{what}: {found} items in runs of 4 (random: at most {random.max()})"


def arrival_runs_of_rows(orders: np.ndarray, length: int = 4) -> np.ndarray:
    """:func:`arrival_runs` of each row of ``orders`` (one order of arrival indices a row), at once:
    the 10,000 orders of the null distribution took over a second of CPU one at a time."""
    total = np.zeros(len(orders))
    for step in (1, -1):
        # A run of k items is k - 1 consecutive steps; where each maximal stretch of steps begins and ends.
        steps = np.diff(orders, axis=1) == step
        edges = np.diff(np.pad(steps, ((0, 0), (1, 1))).astype(np.int8), axis=1)
        rows, begins = np.nonzero(edges == 1)
        _, ends = np.nonzero(edges == -1)
        items = ends - begins + 1
        total += np.bincount(rows, weights=np.where(items >= length, items, 0), minlength=len(orders))
    return total


def logged(db) -> bytes:
    """What the SQLite log and its shared-memory index still hold of pages written: the log's
    frames, and the index's page numbers (one per frame, from byte 136: after its two headers and
    the checkpoint's), with every zero byte left out."""
    out = b""
    if os.path.exists(f"{db}-wal"):
        out += open(f"{db}-wal", "rb").read()
    if os.path.exists(f"{db}-shm"):
        out += open(f"{db}-shm", "rb").read()[136 : 136 + 4 * 4062]
    return out.replace(b"\x00", b"")


def found_in(data: bytes, needles: list[bytes]) -> list[int]:
    """The indices of ``needles`` ordered by where each first occurs in ``data`` (those absent left out)."""
    where = {i: data.find(n) for i, n in enumerate(needles)}
    return [i for i, at in sorted(where.items(), key=lambda item: item[1]) if at >= 0]


async def test_after_a_release_the_files_keep_no_arrival_order_even_when_the_aggregator_withholds_its_answer(aggregator, tmp_path):
    """The review read the shuffler's file after batches left: its released set kept people's
    digests (not the dummies') in pages whose rows lay in arrival order, and the log kept released
    reports in arrival order while the aggregator withheld its answer (40 of 40 found), and the
    log's shared-memory index kept the page each arrival's commit wrote, in order (a flooding
    aggregator found its target among 101 about half the time). Here 150 reports arrive one by
    one, are released in a batch the aggregator refuses, and the files are read byte by byte: the
    log and its index hold no page; every report's bytes and every digest of the batch, the
    dummies' too, lie in no order that follows arrival (the reports are not found at all outside
    the batch)."""
    server, token = aggregator
    db = tmp_path / "s.sqlite3"
    async with Proxy(server.url) as front:
        front.refuse.add("w")
        shuffler = ShufflerProcess(db, front.url, tmp_path / "token.txt", "--interval", "0.5", "--per-address", "0").start()
        try:
            create(server, "w", shuffler.url, token, min_batch=100)
            view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/w/view"))
            arrived = [sealed_under(view) for _ in range(150)]
            for report in arrived:  # one at a time: one commit each, as devices send them
                assert await asyncio.to_thread(post, shuffler.url, "w", report) == 201
            await asyncio.to_thread(wait_for, lambda: len(front.batches) >= 1)
            await asyncio.sleep(1.0)  # the round that drew it has scrubbed the log
            batch = front.batches[0]["reports"]
            assert len(batch) == 250 and all(r in batch for r in arrived)
            held = db.read_bytes()
            assert not logged(db), "the log or its index keeps what it held while the aggregator withholds its answer"
            no_arrival_order(found_in(held, [r[32:80] for r in arrived]), "released reports' bytes")
            digests = [hashlib.sha256(r).digest() for r in arrived]
            no_arrival_order(found_in(held, digests), "released reports' digests")
            dummies = [r for r in batch if r not in set(arrived)]
            assert all(hashlib.sha256(r).digest() in held for r in dummies), "the dummies are not remembered as people are"
            assert (await asyncio.to_thread(shuffler.status))["w"]["waiting"] == 0
            # While the aggregator withholds its answer, a re-post of any report of the batch hears the same.
            answers = await asyncio.to_thread(reposted, shuffler.url, "w", batch)
            assert len(set(answers)) == 1 and answers[0][0] == 200
        finally:
            shuffler.stop()
    with closing(sqlite3.connect(db)) as conn:  # its own now: a running shuffler holds it alone
        assert conn.execute("SELECT count(*) FROM seen").fetchone()[0] == 250


async def test_a_report_that_could_never_be_stored_learns_nothing_of_the_cap(aggregator, tmp_path):
    """At the waiting cap, a report that could be stored hears 429; one that could not (another
    length, another view) hears 400 as at any other time, so that nobody probes the cap without
    spending a report of their own on it. Posted in a batch, the cap counts its storable reports."""
    server, token = aggregator
    cid = fresh_id()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60",
                               "--max-waiting", "3", "--per-address", "0").start()  # fmt: skip
    try:
        create(server, cid, shuffler.url, token, min_batch=100)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/{cid}/view"))
        malformed = view.digest + b"\x00" * 10
        assert answer(f"{shuffler.url}/collections/{cid}/reports", "POST", malformed, SEALED)[0] == 400
        for _ in range(3):
            assert post(shuffler.url, cid, sealed_under(view)) == 201
        assert answer(f"{shuffler.url}/collections/{cid}/reports", "POST", malformed, SEALED)[0] == 400
        assert answer(f"{shuffler.url}/collections/{cid}/reports", "POST", sealed_under(view), SEALED)[0] == 429
        junk_batch = msgpack.packb({"reports": [malformed, b"x"]})
        status, _, body = answer(f"{shuffler.url}/collections/{cid}/reports", "POST", junk_batch, {"Content-Type": "application/msgpack"})
        assert status == 200 and b'"rejected": 2' in body
    finally:
        shuffler.stop()


def _slow(port: int, head: bytes) -> socket.socket:
    """A connection from 127.0.0.1 that has sent ``head`` and then nothing."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sendall(head)
    return conn


def closed(conn: socket.socket) -> bool:
    """Whether the other end closed ``conn`` (whatever it said first), within its timeout."""
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return False
    return True


async def test_slow_clients_hold_nothing_another_party_needs(aggregator, tmp_path):
    """The review's slowloris: from one address, connections declaring large bodies (five of them
    together all but 100 bytes of what the shuffler reads at once), connections declaring one
    report and connections dripping their headers, then a byte now and then. A report to another collection, from another network, is taken within
    a second all the while; a body that does not arrive within --body-timeout is answered 408 and
    headers that do not within --keepalive-timeout close the connection; past
    --max-connections-per-address the attacker's connections are answered 503."""
    server, token = aggregator
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60",
                               "--max-post", "100000", "--body-timeout", "3", "--keepalive-timeout", "3",
                               "--max-connections-per-address", "40", "--per-address", "0").start()  # fmt: skip
    conns: list[socket.socket] = []
    try:
        create(server, "a", shuffler.url, token, min_batch=100)
        create(server, "b", shuffler.url, token, min_batch=100)
        view_a = ShuffledView.from_dict(call(f"{shuffler.url}/collections/a/view"))
        view_b = ShuffledView.from_dict(call(f"{shuffler.url}/collections/b/view"))
        # Five bodies declaring together all but 100 bytes of what the shuffler reads at once (64 MiB),
        # each within collection a's largest batch body; then single reports, and dripped headers.
        declared = [(64 * 2**20 - 100) // 5] * 5
        assert max(declared) <= 100000 * (len(sealed_under(view_a)) + 5) and len(sealed_under(view_b)) > 100
        single = len(sealed_under(view_a))
        heads = [f"POST /collections/a/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
                 f"Content-Length: {size}\r\n\r\n".encode() + b"\x81" for size in declared]  # fmt: skip
        heads += [f"POST /collections/a/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/ldpnb-sealed\r\n"
                  f"Content-Length: {single}\r\n\r\n".encode() + b"\x00"] * 25  # fmt: skip
        for head in heads:
            conns.append(await asyncio.to_thread(_slow, shuffler.port, head))
        for _ in range(10):
            conns.append(await asyncio.to_thread(_slow, shuffler.port, b"POST /collections/a/reports HTTP/1.1\r\nHo"))
        over = await asyncio.to_thread(_slow, shuffler.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert over.recv(100).startswith(b"HTTP/1.1 503")  # the 41st from one network
        over.close()
        connector = aiohttp.TCPConnector(local_addr=("127.0.1.2", 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(3):
                for i, conn in enumerate(conns):
                    try:
                        conn.send(b"\x00" if i < 30 else b"s")  # a byte now and then, of a body or of a header
                    except OSError:
                        pass
                began = time.monotonic()
                async with session.post(f"{shuffler.url}/collections/b/reports", data=sealed_under(view_b), headers=SEALED) as got:
                    assert got.status == 201, await got.text()
                assert time.monotonic() - began < 5.0  # not held: a refusal or a stall, not a speed
                await asyncio.sleep(0.5)
        # Past the body timeout, a dripped body is answered 408; dripped headers were closed.
        await asyncio.sleep(3.0)
        conns[0].settimeout(10)
        assert conns[0].recv(200).startswith(b"HTTP/1.1 408")
        conns[-1].settimeout(10)
        assert closed(conns[-1]), "a connection dripping its headers is still open"
    finally:
        for conn in conns:
            conn.close()
        shuffler.stop()


async def test_a_store_of_the_earlier_layout_drops_its_people_only_released_set_and_old_releases_expire(tmp_path, monkeypatch):
    """A shuffler file written before dummies were remembered holds people's digests alone, in
    arrival order: opened now, that set is gone and the file rebuilt (its bytes no longer in it).
    Released digests leave after the horizon, and all of a collection's when it closes."""
    from shuffler.store import sqlite as store_module

    db = tmp_path / "old.sqlite3"
    people = [os.urandom(32) for _ in range(50)]
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE seen (collection TEXT NOT NULL, digest BLOB NOT NULL, PRIMARY KEY (collection, digest)) WITHOUT ROWID")
        conn.executemany("INSERT INTO seen VALUES ('c', ?)", [(d,) for d in people])
    store = store_module.SQLiteStore(db)
    try:
        held = db.read_bytes() + (open(f"{db}-wal", "rb").read() if os.path.exists(f"{db}-wal") else b"")
        assert not any(d in held for d in people)
        days = iter([100, 200])
        monkeypatch.setattr(store_module, "today", lambda: next(days))  # the day of each release below
        for batch in ([b"a" * 40, b"b" * 40], [b"c" * 40, b"d" * 40]):
            await store.add([("c", s) for s in batch])
            assert await store.release("c", 2, 10, [[]]) != []
        assert await store.add([("c", b"a" * 40), ("c", b"c" * 40)]) == [False, False]  # remembered
        assert await store.expire(150) == 2
        assert await store.add([("c", b"a" * 40), ("c", b"c" * 40)]) == [True, False]  # the older release forgotten
        await store.forget("c")
    finally:
        await store.shut()
    with closing(sqlite3.connect(db)) as conn:  # let go of: readable by another connection now
        assert conn.execute("SELECT count(*) FROM seen").fetchone()[0] == 0
