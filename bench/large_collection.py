"""A report costs what it carries, not what its collection holds: ingest into a collection of a
million statistics entries beside one of fifty, in the same server and run.

    python bench/large_collection.py [--requests 4000] [--concurrency 32] [--batches 20] [--rounds 3]

Starts ``python -m aggregator serve`` on SQLite and on PostgreSQL (a server from the ``pgserver``
wheel) with ``--max-state`` at its default, creates a small collection (one feature of 24 values,
two classes, DE: 50 entries) and a large one (499 features of 1,000 values, two classes, DE:
998,002 entries: a survey of 499 questions), and alternates ``--rounds`` times between them:
single reports (``--requests`` each, ``--concurrency`` in flight) and batches of 1,000
(``--batches`` each). Prints reports/s and the large collection's share of the small one's (goal:
at least 50 % for single reports, within 2× for batches). Then builds the large collection's
model through ``/model`` (from what is stored). Writes ``bench/results/large_collection.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
from ingest import create, drive, drive_raw, postgres_server, start

from participant import CollectionSpec, Feature
from participant.reporting import Report
from participant.wire import pack_batch, pack_report

RESULTS = Path(__file__).with_name("results") / "large_collection.md"


def small() -> CollectionSpec:
    return CollectionSpec([Feature("f", [f"v{i}" for i in range(24)])], ["a", "b"], "DE", 1.0)


def large() -> CollectionSpec:
    values = [f"v{i}" for i in range(1000)]
    return CollectionSpec([Feature(f"q{i}", values) for i in range(499)], ["a", "b"], "DE", 1.0)


def de_reports(spec: CollectionSpec, n: int, seed: int) -> list[Report]:
    """``n`` DE reports on random inputs, with random values."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, spec.n_inputs, n)
    return [Report(int(i), np.int64(rng.integers(spec.domain_sizes[i]))) for i in inputs]


async def rates(url: str, token: str, args) -> dict[str, list[float]]:
    """Reports/s per (collection, kind), one entry per round, the collections alternating."""
    specs = {"small": small(), "large": large()}
    for name, spec in specs.items():
        await create(url, token, spec, name)
    found: dict[str, list[float]] = {f"{n} {k}": [] for n in specs for k in ("single", "batch")}
    for r in range(args.rounds):
        for name, spec in specs.items():
            singles = [pack_report(x, spec) for x in de_reports(spec, args.requests, seed=100 * r + len(name))]
            path = f"/collections/{name}/reports"
            await drive_raw(url, path, singles[:200], args.concurrency)  # warm up
            seconds = await drive_raw(url, path, singles[200:], args.concurrency)
            found[f"{name} single"].append((len(singles) - 200) / seconds)
            batches = [pack_batch(de_reports(spec, 1000, seed=10_000 * r + b), spec) for b in range(args.batches)]
            seconds = await drive(url, path, batches, 4)
            found[f"{name} batch"].append(1000 * len(batches) / seconds)
    return found


async def model_seconds(url: str) -> float:
    start_time = time.perf_counter()
    async with aiohttp.ClientSession() as session, session.get(f"{url}/collections/large/model") as response:
        await response.read()
        assert response.status == 200, response.status
    return time.perf_counter() - start_time


async def main_async(args) -> None:
    token = secrets.token_urlsafe(24)
    lines = [
        f"# Ingest into a collection of 10^6 entries beside one of 50 (`python bench/large_collection.py "
        f"--requests {args.requests} --concurrency {args.concurrency} --batches {args.batches} --rounds {args.rounds}`)",
        "",
        "| database | kind | small (50 entries), reports/s | large (10^6 entries), reports/s | large / small |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        server, fresh = postgres_server(tmp)
        try:
            for label, db in (("SQLite", os.path.join(tmp, "bench.sqlite3")), ("PostgreSQL", fresh())):
                agg, url = start(
                    [sys.executable, "-m", "aggregator", "serve", "--db", db, "--port", "0"],
                    env={**os.environ, "LDPNB_ADMIN_TOKEN": token},
                )
                try:
                    found = await rates(url, token, args)
                    built = await model_seconds(url)
                finally:
                    agg.terminate()
                    agg.wait()
                for kind in ("single", "batch"):
                    a, b = np.median(found[f"small {kind}"]), np.median(found[f"large {kind}"])
                    lines.append(f"| {label} | {kind} reports | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
                    print(lines[-1], flush=True)
                lines.append(f"| {label} | the large collection's model through /model | {built:.1f} s | | |")
        finally:
            server.cleanup()
    lines += ["", "Medians over the rounds; single reports with the lean client of `bench/ingest.py`."]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000, help="single reports per collection and round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20, help="batches of 1,000 per collection and round")
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
