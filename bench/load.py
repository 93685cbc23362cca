"""Load test: thousands of concurrent participants against one aggregator, on loopback only.

    python bench/load.py [--clients 2000] [--seconds 60] [--max-reports 2000000]

Starts ``python -m aggregator serve`` on a free loopback port with a fresh database, creates a
collection, and runs ``--clients`` participants at once for ``--seconds`` (bounded also by
``--max-reports``): each sends one report, waits for the acknowledgement, and is replaced by a new
participant (a new report id). Prints errors, latency percentiles and throughput, and writes them
to ``bench/results/load.md``; every acknowledged report is then checked to be counted.
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
from pathlib import Path

import aiohttp
import numpy as np

from participant import CollectionSpec, Feature
from participant.reporting import Report
from participant.wire import pack_report

RESULTS = Path(__file__).with_name("results") / "load.md"


async def participant_loop(session, url, bodies, deadline, latencies, errors, budget):
    while time.perf_counter() < deadline and budget[0] > 0:
        budget[0] -= 1
        body = bodies[budget[0] % len(bodies)]
        # A fresh report id per participant: replace the 16 id bytes (they follow b"\xa2id\xc4\x10").
        body = body.replace(
            body[body.index(b"\xc4\x10") + 2 : body.index(b"\xc4\x10") + 18], secrets.token_bytes(16), 1
        )
        start = time.perf_counter()
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/msgpack"}) as r:
                await r.read()
                if r.status != 201:
                    errors.append(r.status)
                    continue
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            errors.append(type(exc).__name__)
            continue
        latencies.append(time.perf_counter() - start)


async def main_async(args) -> None:
    token = secrets.token_urlsafe(16)
    spec = CollectionSpec([Feature(f"f{i}", list("abcd")) for i in range(8)], ["x", "y", "z"], "OUE", 1.0)
    rng = np.random.default_rng(0)
    bodies = []
    for i, oracle in enumerate(spec.oracles):
        for row in oracle.perturb(rng.integers(0, oracle.domain_size, 50), rng):
            bodies.append(pack_report(Report(i, row), spec))
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                sys.executable, "-m", "aggregator", "serve", "--db", os.path.join(tmp, "load.sqlite3"), "--port", "0",
                # Every client holds one connection, and all of them come from 127.0.0.1.
                "--max-connections", str(2 * args.clients + 64),
                "--max-connections-per-address", str(2 * args.clients + 64),
            ],  # fmt: skip
            env={**os.environ, "LDPNB_ADMIN_TOKEN": token},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        base = server.stdout.readline().split("listening on ")[1].split()[0]
        try:
            connector = aiohttp.TCPConnector(limit=args.clients)
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
                async with session.post(
                    f"{base}/collections",
                    json={"spec": spec.to_dict(), "id": "load"},
                    headers={"Authorization": f"Bearer {token}"},
                ) as r:
                    assert r.status == 201
                latencies, errors, budget = [], [], [args.max_reports]
                start = time.perf_counter()
                deadline = start + args.seconds
                await asyncio.gather(
                    *(
                        participant_loop(
                            session, f"{base}/collections/load/reports", bodies, deadline, latencies, errors, budget
                        )
                        for _ in range(args.clients)
                    )
                )
                elapsed = time.perf_counter() - start
                async with session.get(
                    f"{base}/collections/load/status", headers={"Authorization": f"Bearer {token}"}
                ) as r:
                    counted = (await r.json())["reports"]
        finally:
            server.terminate()
            server.wait()
    lat = np.array(latencies) * 1000
    lines = [
        f"# Load (`python bench/load.py --clients {args.clients} --seconds {args.seconds:g}`)",
        "",
        f"{args.clients} concurrent participants for {elapsed:.1f} s: acknowledged {len(latencies):,} reports, "
        f"{len(latencies) / elapsed:,.0f}/s; counted {counted:,}; errors {len(errors)}"
        + (f" (e.g. {errors[:5]})" if errors else "") + ".",
        "",
        f"Latency, ms: p50 {np.percentile(lat, 50):.1f}, p90 {np.percentile(lat, 90):.1f}, "
        f"p99 {np.percentile(lat, 99):.1f}, max {lat.max():.1f}.",
    ]  # fmt: skip
    print("\n".join(lines))
    RESULTS.write_text("\n".join(lines) + "\n")
    assert counted == len(latencies), "an acknowledged report is missing from the statistics"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-reports", type=int, default=2_000_000)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
