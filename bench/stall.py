"""How long does an anonymous attack stall the service? The latency of ``/healthz`` during each.

    python bench/stall.py [--seconds 4]

Starts ``python -m aggregator serve`` on a SQLite file (loopback), creates the largest collection
the default limits allow (10^6 statistics entries) with a few reports, then runs each attack for
``--seconds`` while a prober asks ``/healthz`` every 20 ms, and prints the worst and the 99th
percentile latency of the probes under each (``bench/results/stall.md``). An event loop blocked by
a request shows as a probe that waits. Only 127.0.0.1 is contacted; everything stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def probe(url: str, seconds: float) -> list[float]:
    """``/healthz`` latencies (s), one ask every 20 ms for ``seconds``."""
    latencies = []
    end = time.perf_counter() + seconds
    async with aiohttp.ClientSession() as session:
        while time.perf_counter() < end:
            start = time.perf_counter()
            async with session.get(f"{url}/healthz") as r:
                await r.read()
            latencies.append(time.perf_counter() - start)
            await asyncio.sleep(0.02)
    return latencies


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
    try:
        async with session.post(f"{url}/collections/big/reports", data=body, headers=headers) as r:
            await r.read()
    except aiohttp.ClientError:
        pass


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
    from aggregator.estimation.strength import STRENGTHS

    paths = [f"/collections/big/model?estimator={e}" for e in ("paper", "normsub", "ibu")]
    paths += [f"/collections/big/model?estimator={e}&strength={s:g}" for e in ("normsub", "ibu") for s in STRENGTHS]
    return paths


async def every_variant(url: str, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(fetch(session, url, p) for p in model_variants()))


def attacks(url: str):
    host, port = url.removeprefix("http://").split(":")
    other, wrong, valid = report_batches(other_spec=True), report_batches(out_of_range=True), report_batches()
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
    }


async def repeat_each(url: str, bodies: list[bytes], stop, path: str = "/collections/big/reports", headers=MSGPACK):
    """Post every one of ``bodies`` at once, again and again until ``stop``."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(post_to(session, url + path, b, headers) for b in bodies))


async def repeat_fresh(url: str, supply, stop) -> None:
    """Two fresh valid batches at once (new report ids every time), until ``stop``."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            await asyncio.gather(*(post_to(session, f"{url}/collections/big/reports", next(supply)) for _ in range(2)))


async def post_to(session, url: str, body: bytes, headers=MSGPACK) -> None:
    try:
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
    except aiohttp.ClientError:
        pass


async def measure(url: str, seconds: float) -> list[tuple[str, float, float, int]]:
    rows = []
    for name, attack in attacks(url).items():
        stop = asyncio.Event()
        running = asyncio.create_task(attack(stop))
        await asyncio.sleep(0.2)  # the attack under way
        latencies = await probe_elsewhere(url, seconds)
        stop.set()
        await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 120)
        rows.append((name, max(latencies), float(np.percentile(latencies, 99)), len(latencies)))
        print(f"{name}: worst {rows[-1][1] * 1e3:.0f} ms, p99 {rows[-1][2] * 1e3:.0f} ms", flush=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per attack (default 4)")
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)  # the prober's own process
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(asyncio.run(probe(args.probe, args.seconds))))
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [sys.executable, "-m", "aggregator", "serve", "--db", f"{tmp}/stall.sqlite3", "--port", str(port)],
            env={**os.environ, "LDPNB_ADMIN_TOKEN": TOKEN},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert "listening on" in server.stdout.readline()
            url = f"http://127.0.0.1:{port}"
            asyncio.run(prepare(url))
            rows = asyncio.run(measure(url, args.seconds))
        finally:
            server.terminate()
            server.wait(30)
    lines = [
        f"# /healthz latency while an anonymous attack runs (`python bench/stall.py --seconds {args.seconds:g}`)",
        "",
        "| attack | worst | 99th percentile | probes |",
        "|---|---|---|---|",
        *(f"| {name} | {worst * 1e3:.0f} ms | {p99 * 1e3:.0f} ms | {n} |" for name, worst, p99, n in rows),
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
