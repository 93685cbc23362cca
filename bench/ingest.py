"""Aggregator ingest throughput over loopback HTTP, beside a bare aiohttp handler in the same run.

    python bench/ingest.py [--requests 20000] [--concurrency 64] [--batch 1000] [--batches 100]
                           [--bare-rounds 5] [--rounds 5] [--ratio-concurrency 64 256]

Starts ``python -m aggregator serve`` on SQLite (WAL, synchronous=FULL: an acknowledged report is
on disk), on PostgreSQL with one worker and with two (durable commits), and a bare aiohttp app
that only reads the body and answers 201, each in its own processes, and drives each from this
process (which shares the machine's cores with them). The bare app runs on the event loop the
service takes (``serve --loop auto``: uvloop where it is installed), so that the ratio compares
the applications, not the loops. PostgreSQL is a server started for the run from the
``pgserver`` wheel, with its default settings. Targets (issue 25): single-report ingest at least
60 % of the bare handler's requests/s on SQLite and 70 % on PostgreSQL; batches at least 100,000
reports/s; two PostgreSQL workers at least 1.3 times one worker's single-report rate.
Prints the tables and writes them to ``bench/results/ingest.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from participant import CollectionSpec, Feature
from participant.reporting import Report
from participant.wire import pack_batch, pack_report

RESULTS = Path(__file__).with_name("results") / "ingest.md"

BARE_SERVER = """
import asyncio
from aiohttp import web
async def handle(request):
    await request.read()
    return web.json_response({"status": "accepted"}, status=201)
app = web.Application()
app.router.add_post("/collections/{id}/reports", handle)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048)
    await site.start()
    print("listening on http://127.0.0.1:%d" % runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()
try:
    import uvloop
except ImportError:
    asyncio.run(main())
else:
    uvloop.run(main())
"""


def start(cmd, env=None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline()
    return proc, line.split("listening on ")[1].split()[0]


def spec() -> CollectionSpec:
    # A mid-sized collection: 8 features of 4 values, 3 classes, OUE (bit-vector reports).
    return CollectionSpec([Feature(f"f{i}", list("abcd")) for i in range(8)], ["x", "y", "z"], "OUE", 1.0)


def reports(s: CollectionSpec, n: int, seed: int = 0) -> list[Report]:
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, s.n_inputs, n)
    out = []
    for i, oracle in enumerate(s.oracles):
        rows = oracle.perturb(rng.integers(0, oracle.domain_size, int((inputs == i).sum())), rng)
        out += [Report(i, row) for row in rows]
    return out


async def drive(url: str, path: str, bodies: list[bytes], concurrency: int) -> float:
    """Seconds to POST every body with ``concurrency`` requests in flight; checks every answer."""
    it = iter(bodies)
    failures = []

    async def worker(session):
        for body in it:
            async with session.post(url + path, data=body, headers={"Content-Type": "application/msgpack"}) as r:
                await r.read()
                if r.status not in (200, 201):
                    failures.append(r.status)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[:5]}")
    return elapsed


class _Pipe(asyncio.Protocol):
    """One kept-alive connection of :func:`drive_raw`: sends the next prebuilt request as soon as
    the previous answer is complete."""

    def __init__(self, requests, statuses: list[int], done: asyncio.Future, latencies: list[float] | None = None):
        self.requests, self.statuses, self.done, self.latencies = requests, statuses, done, latencies
        self.buffer = b""
        self.sent = 0.0

    def connection_made(self, transport):
        self.transport = transport
        self._send_next()

    def _send_next(self) -> None:
        request = next(self.requests, None)
        if request is None:
            self.transport.close()
        else:
            self.sent = time.perf_counter()
            self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end]
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(self.buffer) < end + 4 + length:
                return
            self.statuses.append(int(head[9:12]))
            if self.latencies is not None:
                self.latencies.append(time.perf_counter() - self.sent)
            self.buffer = self.buffer[end + 4 + length :]
            self._send_next()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result(exc)


async def drive_raw(
    url: str, path: str, bodies: list[bytes], concurrency: int, content_type: str = "application/msgpack",
    latencies: list[float] | None = None,
) -> float:
    """:func:`drive` with a lean HTTP/1.1 client (prebuilt requests on kept-alive connections, an
    asyncio protocol that parses only the status line and Content-Length): the load generator
    shares this machine's cores with the servers, and every microsecond it spends per request is
    taken from them, which would hide whether more server processes help. ``latencies``, when
    given, receives every request's seconds from sent to answered."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nContent-Length: "
    requests = iter([f"{head}{len(body)}\r\n\r\n".encode() + body for body in bodies])
    statuses: list[int] = []
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    done = [loop.create_future() for _ in range(concurrency)]
    for future in done:
        await loop.create_connection(lambda f=future: _Pipe(requests, statuses, f, latencies), host, int(port))
    errors = [e for e in await asyncio.gather(*done) if e is not None]
    elapsed = time.perf_counter() - start
    failures = [s for s in statuses if s not in (200, 201)]
    if errors or failures or len(statuses) != len(bodies):
        raise RuntimeError(
            f"{len(bodies) - len(statuses)} unanswered, {len(failures)} failed, e.g. {failures[:5]} {errors[:1]}"
        )
    return elapsed


async def create(url: str, token: str, s: CollectionSpec, cid: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/collections", json={"spec": s.to_dict(), "id": cid}, headers=headers) as r,
    ):
        assert r.status == 201, await r.text()


async def measure(db: str, workers: int, token: str, singles, batches, concurrency: int, batch_size: int = 0):
    """``(single reports/s, batched reports/s or None)`` of one configuration, on a fresh server."""
    agg, agg_url = start(
        [sys.executable, "-m", "aggregator", "serve", "--db", db, "--port", "0", "--workers", str(workers)],
        env={**os.environ, "LDPNB_ADMIN_TOKEN": token},
    )
    s = spec()
    try:
        await create(agg_url, token, s, "single")
        await create(agg_url, token, s, "batched")
        await drive_raw(agg_url, "/collections/single/reports", singles[:500], concurrency)  # warm up
        single_s = await drive_raw(agg_url, "/collections/single/reports", singles[500:], concurrency)
        batched = None
        if batches:
            batch_s = await drive(agg_url, "/collections/batched/reports", batches, min(concurrency, 8))
            batched = batch_size * len(batches) / batch_s
    finally:
        agg.terminate()
        agg.wait()
    return (len(singles) - 500) / single_s, batched


def postgres_server(tmp: str):
    """A PostgreSQL server for the run (the ``pgserver`` wheel's binaries) and a function giving a
    fresh database URL on it per call."""
    import pgserver

    server = pgserver.get_server(os.path.join(tmp, "postgres"), cleanup_mode="stop")
    counter = iter(range(10**6))

    def fresh() -> str:
        name = f"bench_{next(counter)}"
        server.psql(f"CREATE DATABASE {name};")
        base, _, query = server.get_uri().partition("?")
        return f"{base.rsplit('/', 1)[0]}/{name}?{query}"

    return server, fresh


async def bare_rate(singles: list[bytes], concurrency: int) -> float:
    """Requests/s of the bare handler, on a fresh process."""
    bare, bare_url = start([sys.executable, "-c", BARE_SERVER])
    try:
        await drive_raw(bare_url, "/collections/x/reports", singles[:500], concurrency)
        return (len(singles) - 500) / await drive_raw(bare_url, "/collections/x/reports", singles[500:], concurrency)
    finally:
        bare.terminate()
        bare.wait()


def single_bodies(s: CollectionSpec, n: int) -> list[bytes]:
    """``n`` packed single reports in random input order: devices choose their input at random."""
    single_reports = reports(s, n)
    np.random.default_rng(2).shuffle(single_reports)
    return [pack_report(r, s) for r in single_reports]


async def main_async(args) -> None:
    s = spec()
    token = secrets.token_urlsafe(24)
    singles = single_bodies(s, args.requests + 500)
    batch_reports = reports(s, args.batch * args.batches, seed=1)
    batches = [pack_batch(batch_reports[i : i + args.batch], s) for i in range(0, len(batch_reports), args.batch)]
    names = ["SQLite, 1 worker", "PostgreSQL, 1 worker", "PostgreSQL, 2 workers"]
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in names}  # (rate, bare rate that round)
    batched: dict[str, float] = {}
    bare_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        server, fresh = postgres_server(tmp)
        try:
            configurations = [
                (names[0], lambda r: os.path.join(tmp, f"bench{r}.sqlite3"), 1),
                (names[1], lambda r: fresh(), 1),
                (names[2], lambda r: fresh(), 2),
            ]
            # Each configuration is measured right after the bare handler, round after round: the
            # rates move by tens of percent over minutes on this shared virtual machine.
            for round_ in range(args.bare_rounds):
                for name, db, workers in configurations:
                    bare = await bare_rate(singles, args.concurrency)
                    bare_rates.append(bare)
                    single, batch = await measure(
                        db(round_),
                        workers,
                        token,
                        singles,
                        batches if round_ == 0 else [],
                        args.concurrency,
                        args.batch,
                    )
                    rates[name].append((single, bare))
                    if batch is not None:
                        batched[name] = batch
                    print(
                        f"round {round_ + 1}: {name:<24} {single:>9,.0f} single reports/s, bare {bare:,.0f}/s "
                        f"({single / bare:.0%})",
                        flush=True,
                    )
            # Two workers against one: measured alternately and compared per round.
            ratios = {}
            for concurrency in args.ratio_concurrency:
                for round_ in range(args.rounds):
                    one, _ = await measure(fresh(), 1, token, singles, [], concurrency)
                    two, _ = await measure(fresh(), 2, token, singles, [], concurrency)
                    ratios.setdefault(concurrency, []).append((one, two))
                    print(
                        f"{concurrency} in flight, round {round_ + 1}: 1 worker {one:,.0f}/s, "
                        f"2 workers {two:,.0f}/s, {two / one:.2f}x",
                        flush=True,
                    )
        finally:
            server.cleanup()
    print()
    print(
        f"{args.requests:,} single-report requests with {args.concurrency} in flight (random input order), each "
        f"configuration beside the bare handler in {args.bare_rounds} alternating rounds; "
        f"{args.batches} batches of {args.batch:,} with 8 in flight"
    )
    print()
    print(
        "| configuration | single reports/s (median) | % of the bare handler, per round | median | batched reports/s |"
    )
    print("|---|---|---|---|---|")
    print(f"| bare aiohttp handler | {np.median(bare_rates):,.0f} requests/s | | 100 % | |")
    for name in names:
        single, bare = np.array(rates[name]).T
        share = single / bare
        print(
            f"| {name} | {np.median(single):,.0f} | {', '.join(f'{x:.0%}' for x in share)} | {np.median(share):.0%} "
            f"| {batched[name]:,.0f} |"
        )
    print()
    print(f"PostgreSQL single reports, 1 worker against 2 workers, {args.rounds} alternating rounds (target >= 1.3x):")
    print()
    print("| in flight | 1 worker, median /s | 2 workers, median /s | ratio per round | median ratio |")
    print("|---|---|---|---|---|")
    for concurrency, pairs in ratios.items():
        one, two = np.array(pairs).T
        per_round = ", ".join(f"{r:.2f}" for r in two / one)
        print(
            f"| {concurrency} | {np.median(one):,.0f} | {np.median(two):,.0f} | {per_round} | "
            f"{np.median(two / one):.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight for the table")
    parser.add_argument("--rounds", type=int, default=5, help="alternating 1-worker/2-worker rounds")
    parser.add_argument(
        "--bare-rounds", type=int, default=5, help="rounds of each configuration beside the bare handler"
    )
    parser.add_argument(
        "--ratio-concurrency",
        type=int,
        nargs="+",
        default=[64, 256],
        help="requests in flight for the worker comparison",
    )
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=100)
    args = parser.parse_args()
    # The tables are printed as they are measured and kept, whole, in the results file.
    printed = io.StringIO()
    with contextlib.redirect_stdout(Tee(sys.stdout, printed)):
        asyncio.run(main_async(args))
    command = f"python bench/ingest.py --requests {args.requests} --concurrency {args.concurrency} --rounds {args.rounds}"
    RESULTS.write_text(f"# Ingest over loopback HTTP (`{command}`)\n\n" + printed.getvalue())


class Tee(io.TextIOBase):
    """Writes to every stream it is given."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


if __name__ == "__main__":
    main()
