"""How long does an anonymous attack stall the service? The latency of ``/healthz`` during each.

    python bench/stall.py [--seconds 4] [--backends sqlite,postgres] [--only TEXT]

Starts ``python -m aggregator serve --db-timeout 2`` on a SQLite file, then on a PostgreSQL the
``pgserver`` wheel starts (loopback), creates the largest collection the default limits allow (10^6
statistics entries), two wide ones (499 features of 1,000 values, a 3.95 MB spec; 55,000 features
of 9 values, 55,001 inputs) and ten collections of 10^6 entries every cell of which is counted,
then runs each attack for ``--seconds`` (and until its last round ends) while a prober asks
``/healthz`` every 20 ms for as long as the load lasts, and prints the worst and the 99th percentile
latency of the probes under each, and the answers to its posts by status
(``bench/results/stall.md``). The model attacks post a new report before each round, as users do.
An event loop blocked by a request shows as a probe that waits. Only 127.0.0.1 is contacted;
everything stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import msgpack
import numpy as np

from participant import CollectionSpec, Feature, Participant
from participant.wire import pack_batch

RESULTS = Path(__file__).with_name("results") / "stall.md"
TOKEN = "stall-bench-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MSGPACK = {"Content-Type": "application/msgpack"}
# The largest spec the default --max-state (10^6) admits: one feature of 499,999 values, 2 classes.
LARGEST = CollectionSpec([Feature("v", [str(i) for i in range(499_999)])], ["a", "b"], "DE", 1.0)
# Wide specs of about as many entries: 499 features of 1,000 values (a 3.95 MB spec), and 55,000
# features of 9 values (55,001 inputs).
WIDE = CollectionSpec([Feature(f"f{j}", [str(i) for i in range(1000)]) for j in range(499)], ["a", "b"], "DE", 1.0)
VERY_WIDE = CollectionSpec([Feature(f"f{j}", [str(i) for i in range(9)]) for j in range(55_000)], ["a", "b"], "DE", 1.0)
FULL = 10  # collections of 10^6 entries each, every cell counted (OUE), for /metrics and the listing
FULL_SPEC = CollectionSpec([Feature("v", [str(i) for i in range(499_999)])], ["a", "b"], "OUE", 1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def probe(url: str, seconds: float) -> list[float]:
    """``/healthz`` latencies (s), one ask every 20 ms for ``seconds``."""
    end = time.perf_counter() + seconds
    return await probe_while(url, lambda: time.perf_counter() < end)


async def probe_until(url: str, until: Path) -> list[float]:
    """``/healthz`` latencies (s), one ask every 20 ms until the file ``until`` exists."""
    return await probe_while(url, lambda: not until.exists())


async def probe_while(url: str, going) -> list[float]:
    """``/healthz`` latencies (s), one ask every 20 ms while ``going()``."""
    latencies = []
    async with aiohttp.ClientSession() as session:
        while going():
            start = time.perf_counter()
            async with session.get(f"{url}/healthz") as r:
                await r.read()
            latencies.append(time.perf_counter() - start)
            await asyncio.sleep(0.02)
    return latencies


class Prober:
    """:func:`probe_until` in a process of its own, from entry to exit; ``latencies`` (s)."""

    def __init__(self, url: str):
        self.url = url

    async def __aenter__(self) -> Prober:
        self.until = Path(tempfile.mkdtemp()) / "stop"
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--probe", self.url, "--until", str(self.until), stdout=asyncio.subprocess.PIPE
        )
        return self

    async def __aexit__(self, *exc) -> None:
        self.until.touch()
        out, _ = await self.proc.communicate()
        self.latencies = json.loads(out)


async def probe_elsewhere(url: str, seconds: float) -> list[float]:
    """:func:`probe` in a process of its own, so the attackers' work here never delays a probe."""
    prober = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--probe", url, "--seconds", str(seconds), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await prober.communicate()
    return json.loads(out)


async def fetch(session, url: str, path: str) -> None:
    async with session.get(url + path) as r:
        await r.read()


async def post(session, url: str, body: bytes, headers=MSGPACK) -> None:
    await post_to(session, f"{url}/collections/big/reports", body, headers)


async def drip(host: str, port: int, stop: asyncio.Event) -> None:
    """A connection sending a report's body one byte a second."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /collections/big/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
            b"Content-Length: 1000\r\n\r\n"
        )
        while not stop.is_set():
            writer.write(b"\x00")
            await writer.drain()
            await asyncio.sleep(1)
        writer.close()
    except (ConnectionError, OSError):
        pass


async def drips(host: str, port: int, stop: asyncio.Event, count: int) -> None:
    await asyncio.gather(*(drip(host, port, stop) for _ in range(count)))


def report_batches(other_spec: bool = False, out_of_range: bool = False):
    """An endless supply of 10,000-report batches for the largest collection: valid and fresh, built
    for another spec (its digest), or with every value out of range."""
    rng = np.random.default_rng(1)
    digest = CollectionSpec([Feature("w", ["x", "y"])], ["a", "b"], "DE", 1.0).fingerprint_digest
    while True:
        wire = []
        for _ in range(10_000):
            value = int(rng.integers(0, 999_998)) + (10**6 if out_of_range else 0)
            report = {"id": rng.bytes(16), "spec": digest if other_spec else LARGEST.fingerprint_digest, "input": 1,
                      "value": value}  # fmt: skip
            wire.append(report)
        yield msgpack.packb({"reports": wire})


def model_variants() -> list[str]:
    """Every /model a stranger may ask of one collection: each estimator, each strength it takes, each format."""
    from aggregator.estimation.smoothing import STRENGTHS

    paths = [f"/collections/big/model?estimator={e}" for e in ("paper", "normsub", "ibu")]
    paths += [f"/collections/big/model?estimator={e}&strength={s:g}" for e in ("normsub", "ibu") for s in STRENGTHS]
    return paths


async def every_variant(url: str, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(fetch(session, url, p) for p in model_variants()))


def wide_batches():
    """An endless supply of fresh valid 10,000-report batches into the 55,001-input collection."""
    rng = np.random.default_rng(2)
    while True:
        inputs = rng.integers(1, VERY_WIDE.n_inputs, 10_000)
        wire = [{"id": rng.bytes(16), "spec": VERY_WIDE.fingerprint_digest, "input": int(i), "value": int(rng.integers(18))}
                for i in inputs]  # fmt: skip
        yield msgpack.packb({"reports": wire})


async def trickle(url: str, stop: asyncio.Event) -> None:
    """A report into each 10^6-entry collection every 0.2 s: their counts keep changing."""
    rng = np.random.default_rng(3)
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            for c in range(FULL):
                report = {"id": rng.bytes(16), "spec": FULL_SPEC.fingerprint_digest, "input": 0, "value": bytes([0x40])}
                await post_to(session, f"{url}/collections/full{c}/reports", msgpack.packb(report))
            await asyncio.sleep(0.2)


async def with_trickle(url: str, make, stop: asyncio.Event) -> None:
    """``make`` 4 at once, again and again, while :func:`trickle` keeps the counts moving."""
    async with aiohttp.ClientSession() as session:
        async def loop():
            while not stop.is_set():
                await asyncio.gather(*(make(session) for _ in range(4)))

        await asyncio.gather(trickle(url, stop), loop())


def wide_model_keys() -> list[str]:
    """Thirty /model keys on the wide collections: each estimator and strength, two formats."""
    from aggregator.estimation.smoothing import STRENGTHS

    paths = [f"/collections/{c}/model?estimator=normsub&strength={s:g}" for c in ("wide", "verywide") for s in STRENGTHS]
    paths += [f"/collections/{c}/model?estimator={e}" for c in ("wide", "verywide") for e in ("paper", "normsub", "ibu")]
    return (paths * 2)[:30]


async def foreign_lock(db: str, url: str, stop: asyncio.Event) -> None:
    """Another process holding the SQLite file's write lock while reports arrive (each answered 503)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(3600)", db,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await holder.stdout.readline()
    try:
        rng = np.random.default_rng(4)
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                report = {"id": rng.bytes(16), "spec": LARGEST.fingerprint_digest, "input": 0, "value": 0}
                await asyncio.gather(*(post_to(session, f"{url}/collections/big/reports", msgpack.packb(report)) for _ in range(4)))
    finally:
        holder.kill()
        await holder.wait()


def attacks(url: str, db: str | None = None):
    host, port = url.removeprefix("http://").split(":")
    other, wrong, valid = report_batches(other_spec=True), report_batches(out_of_range=True), report_batches()
    wide = wide_batches()
    others = [next(other) for _ in range(4)]
    wrongs = [next(wrong) for _ in range(8)]
    flat_json = b"[" + b"0," * (4 * 2**20 - 1) + b"0]"  # 8 MiB
    admin = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    empty_arrays = b"\xdd" + (8 << 20).to_bytes(4, "big") + b"\x90" * ((8 << 20) - 8)
    empty_maps = b"\xdd" + (8 << 20).to_bytes(4, "big") + b"\x80" * ((8 << 20) - 8)
    bomb = gzip.compress(bytes(1 << 30), 9)

    async def repeat(make, stop):
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                await asyncio.gather(*(make(session) for _ in range(4)))

    return {
        "nothing (baseline)": lambda stop: stop.wait(),
        "msgpack: 8 MiB of empty arrays, 4 at once": lambda stop: repeat(lambda s: post(s, url, empty_arrays), stop),
        "msgpack: 8 MiB of empty maps, 4 at once": lambda stop: repeat(lambda s: post(s, url, empty_maps), stop),
        "gzip bomb (1 GiB inflated), 4 at once": lambda stop: repeat(
            lambda s: post(s, url, bomb, {**MSGPACK, "Content-Encoding": "gzip"}), stop
        ),
        "largest spec: GET /estimates, 4 at once": lambda stop: repeat(
            lambda s: fetch(s, url, "/collections/big/estimates"), stop
        ),
        "largest spec: GET /model, 4 at once": lambda stop: repeat(lambda s: fetch(s, url, "/collections/big/model"), stop),
        "200 connections dripping a body at 1 byte/s": lambda stop: drips(host, int(port), stop, 200),
        "10,000 reports built for another spec, 4 at once": lambda stop: repeat_each(url, others, stop),
        "10,000 out-of-range values, 8 at once": lambda stop: repeat_each(url, wrongs, stop),
        "a valid 10,000-report batch into the largest collection, 2 at once": lambda stop: repeat_fresh(url, valid, stop),
        "GET /metrics, 4 at once": lambda stop: repeat(lambda s: fetch(s, url, "/metrics"), stop),
        f"every /model variant at once ({len(model_variants())})": lambda stop: every_variant(url, stop),
        "admin: a flat 8 MiB JSON body, 2 at once": lambda stop: repeat_each(
            url, [flat_json, flat_json], stop, "/collections", admin
        ),
        "GET /collections/wide (499 x 1,000, a 3.95 MB spec), 4 at once": lambda stop: repeat(
            lambda s: fetch(s, url, "/collections/wide"), stop
        ),
        "GET /collections/verywide (55,001 inputs), 4 at once": lambda stop: repeat(
            lambda s: fetch(s, url, "/collections/verywide"), stop
        ),
        f"GET /metrics, 4 at once, {FULL} collections of 10^6 entries, their counts changing": lambda stop: with_trickle(
            url, lambda s: fetch(s, url, "/metrics"), stop
        ),
        f"admin: the listing, 4 at once, the same {FULL} collections": lambda stop: with_trickle(
            url, lambda s: fetch_as_admin(s, url, "/collections?limit=1000"), stop
        ),
        "30 /model keys at once on the wide collections": lambda stop: repeat_all(url, wide_model_keys(), stop),
        "10,000-report batches into the 55,001-input collection, 2 at once": lambda stop: repeat_fresh(
            url, wide, stop, "/collections/verywide/reports"
        ),
        **({"another process holding SQLite's write lock, reports arriving (--db-timeout 2)": lambda stop: foreign_lock(db, url, stop)}
           if db else {}),
    }


async def repeat_each(url: str, bodies: list[bytes], stop, path: str = "/collections/big/reports", headers=MSGPACK):
    """Post every one of ``bodies`` at once, again and again until ``stop``."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(post_to(session, url + path, b, headers) for b in bodies))


async def repeat_fresh(url: str, supply, stop, path: str = "/collections/big/reports") -> None:
    """Two fresh valid batches at once (new report ids every time), until ``stop``."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(post_to(session, f"{url}{path}", next(supply)) for _ in range(2)))


async def repeat_all(url: str, paths: list[str], stop) -> None:
    """Every one of ``paths`` at once, again and again until ``stop``, a new report into each
    wide collection before each round (what users do: no answer is ever served from the cache)."""
    rng = np.random.default_rng(5)
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            for cid, spec in (("wide", WIDE), ("verywide", VERY_WIDE)):
                report = {"id": rng.bytes(16), "spec": spec.fingerprint_digest, "input": 0, "value": 0}
                await post_to(session, f"{url}/collections/{cid}/reports", msgpack.packb(report))
            await asyncio.gather(*(fetch(session, url, p) for p in paths))


async def fetch_as_admin(session, url: str, path: str) -> None:
    async with session.get(url + path, headers=AUTH) as r:
        await r.read()


PREPARE_RESENDS = [0]  # re-sends the preparation needed (a wide report's write refused 503)
# The answers to the attack under way's posts, by status ("error": no answer).
OUTCOMES: Counter = Counter()


async def post_to(session, url: str, body: bytes, headers=MSGPACK) -> None:
    try:
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
            OUTCOMES[str(r.status)] += 1
    except aiohttp.ClientError:
        OUTCOMES["error"] += 1


async def measure(url: str, seconds: float, db: str | None = None, only: str = "") -> list[tuple[str, float, float, int]]:
    rows = []
    for name, attack in attacks(url, db).items():
        if only and only not in name:
            continue
        stop = asyncio.Event()
        OUTCOMES.clear()
        running = asyncio.create_task(attack(stop))
        await asyncio.sleep(0.2)  # the attack under way
        # Probed for ``seconds`` and then until the attack's last round has ended: as long as the load lasts.
        async with Prober(url) as prober:
            await asyncio.sleep(seconds)
            stop.set()
            await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 180)
        latencies = prober.latencies
        answers = ", ".join(f"{status}: {n:,}" for status, n in sorted(OUTCOMES.items())) or "-"
        rows.append((name, max(latencies), float(np.percentile(latencies, 99)), len(latencies), answers))
        print(f"{name}: worst {rows[-1][1] * 1e3:.0f} ms, p99 {rows[-1][2] * 1e3:.0f} ms, posts {answers}", flush=True)
    return rows


async def prepare(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"spec": LARGEST.to_dict(), "id": "big", "min_reports": 0}
        async with session.post(f"{url}/collections", json=body, headers=AUTH) as r:
            assert r.status == 201, await r.text()
        participant = Participant(LARGEST, rng=np.random.default_rng(0))
        reports = [participant.report({"v": str(i), "class": "ab"[i % 2]}) for i in range(200)]
        async with session.post(f"{url}/collections/big/reports", data=pack_batch(reports, LARGEST), headers=MSGPACK) as r:
            assert r.status == 200, await r.text()
        for cid, spec in [("wide", WIDE), ("verywide", VERY_WIDE), *((f"full{c}", FULL_SPEC) for c in range(FULL))]:
            body = {"spec": spec.to_dict(), "id": cid, "min_reports": 0}
            async with session.post(f"{url}/collections", json=body, headers=AUTH) as r:
                assert r.status == 201, await r.text()
            participant = Participant(spec, rng=np.random.default_rng(0))
            names = [f.name for f in spec.features]
            count = 4 if spec is FULL_SPEC else 200  # four OUE reports reach two thirds of the cells
            reports = [participant.report({**{n: "1" for n in names}, "class": "ab"[i % 2]}) for i in range(count)]
            for part in [reports] if spec is not FULL_SPEC else [[r] for r in reports]:
                # Re-sent until stored, as a device does: a wide OUE report's write on PostgreSQL
                # (268,000 cells, 1.3-1.8 s) may pass --db-timeout 2 on a busy machine.
                for attempt in range(10):
                    async with session.post(f"{url}/collections/{cid}/reports", data=pack_batch(part, spec), headers=MSGPACK) as r:
                        if r.status == 200:
                            break
                        assert r.status == 503 and attempt < 9, await r.text()
                        PREPARE_RESENDS[0] += 1


def serve_and_measure(db: str, seconds: float, only: str, sqlite_file: str | None) -> list:
    """Start the service on ``db``, prepare its collections, run the attacks; their rows."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "aggregator", "serve", "--db", db, "--port", str(port), "--db-timeout", "2"],
        env={**os.environ, "LDPNB_ADMIN_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert "listening on" in server.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        asyncio.run(prepare(url))
        return asyncio.run(measure(url, seconds, sqlite_file, only))
    finally:
        server.terminate()
        server.wait(30)


def table(rows: list) -> list[str]:
    return [
        "| attack | worst | 99th percentile | probes | answers to its posts |",
        "|---|---|---|---|---|",
        *(f"| {name} | {worst * 1e3:.0f} ms | {p99 * 1e3:.0f} ms | {n} | {answers} |" for name, worst, p99, n, answers in rows),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per attack (default 4)")
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)  # the prober's own process
    parser.add_argument("--until", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help="run only the attacks whose name holds this text")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both (default both)")
    args = parser.parse_args()
    if args.probe:
        until = probe_until(args.probe, args.until) if args.until else probe(args.probe, args.seconds)
        print(json.dumps(asyncio.run(until)))
        return
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        if "sqlite" in args.backends:
            rows = serve_and_measure(f"{tmp}/stall.sqlite3", args.seconds, args.only, f"{tmp}/stall.sqlite3")
            sections += ["## SQLite", "", *table(rows), ""]
        if "postgres" in args.backends:
            sys.path.insert(0, str(Path(__file__).parent))
            from ingest import postgres_server

            server, fresh = postgres_server(tmp)
            try:
                rows = serve_and_measure(fresh(), args.seconds, args.only, None)
            finally:
                server.cleanup()
            sections += ["## PostgreSQL (the pgserver wheel's server, default settings)", "", *table(rows), ""]
        sections += [f"Re-sends the preparation needed (a report refused 503, then stored): {PREPARE_RESENDS[0]}.", ""]
    lines = [
        f"# /healthz latency while an anonymous attack runs (`python bench/stall.py --seconds {args.seconds:g}`)",
        "",
        "A prober in another process asks `/healthz` every 20 ms for as long as each attack's load lasts; the "
        "service runs with `--db-timeout 2`; the last column counts the answers to the attack's posts. Goal: "
        "a 99th percentile of at most 50 ms and a worst of at most 100 ms under every attack.",
        "",
        *sections,
    ]
    if not args.only:
        RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
