"""Aggregator ingest throughput over loopback HTTP, beside a bare aiohttp handler in the same run.

    python bench/ingest.py [--requests 20000] [--concurrency 64] [--batch 1000] [--batches 100]

Starts ``python -m aggregator serve`` (SQLite, WAL, synchronous=FULL: an acknowledged report is
on disk) and a bare aiohttp app that only reads the body and answers 201, each in its own process,
and drives both from this process. Targets: single-report ingest at least half the bare
handler's requests/s; batches at least 100,000 reports/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time

import aiohttp
import numpy as np

from participant import CollectionSpec, Feature
from participant.reporting import Report
from participant.wire import pack_batch, pack_report

BARE_SERVER = """
import sys
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
    import asyncio
    await asyncio.Event().wait()
import asyncio
asyncio.run(main())
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


async def create(url: str, token: str, s: CollectionSpec, cid: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{url}/collections", json={"spec": s.to_dict(), "id": cid}, headers={"Authorization": f"Bearer {token}"}
        ) as r:
            assert r.status == 201, await r.text()


async def main_async(args) -> None:
    s = spec()
    token = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory() as tmp:
        agg, agg_url = start(
            [sys.executable, "-m", "aggregator", "serve", "--db", os.path.join(tmp, "bench.sqlite3"), "--port", "0"],
            env={**os.environ, "LDPNB_ADMIN_TOKEN": token},
        )
        bare, bare_url = start([sys.executable, "-c", BARE_SERVER])
        try:
            await create(agg_url, token, s, "single")
            await create(agg_url, token, s, "batched")
            singles = [pack_report(r, s) for r in reports(s, args.requests)]
            # Warm up both servers, then measure.
            await drive(bare_url, "/collections/x/reports", singles[:500], args.concurrency)
            bare_s = await drive(bare_url, "/collections/x/reports", singles, args.concurrency)
            single_s = await drive(agg_url, "/collections/single/reports", singles, args.concurrency)
            batch_reports = reports(s, args.batch * args.batches, seed=1)
            batches = [
                pack_batch(batch_reports[i : i + args.batch], s) for i in range(0, len(batch_reports), args.batch)
            ]
            batch_s = await drive(agg_url, "/collections/batched/reports", batches, min(args.concurrency, 8))
        finally:
            agg.terminate()
            bare.terminate()
    bare_rate, single_rate = args.requests / bare_s, args.requests / single_s
    print(f"bare aiohttp handler      {bare_rate:>10,.0f} requests/s")
    print(
        f"single-report ingest      {single_rate:>10,.0f} reports/s  ({single_rate / bare_rate:.0%} of bare; target >= 50%)"
    )
    print(f"batched ingest ({args.batch}/req)  {len(batch_reports) / batch_s:>10,.0f} reports/s  (target >= 100,000)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=100)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
