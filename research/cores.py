"""Where this machine's cores go while single reports arrive: the load generator, the service's
processes and PostgreSQL's, for one worker and for two.

    python research/cores.py [--requests 20000] [--concurrency 64 256]

Drives ``python -m aggregator serve --workers N`` on a PostgreSQL started for the run (as
bench/ingest.py does) and reads each process's CPU time from /proc before and after (Linux).
Prints, per configuration, the reports/s and the cores each party used (CPU seconds over wall
seconds), and what stayed idle. Writes nothing.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from ingest import create, drive_raw, postgres_server, single_bodies, spec, start

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            children = task / "children"
            if children.exists():
                todo += [int(c) for c in children.read_text().split()]
    return out


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"postgres" in (entry / "cmdline").read_bytes().split(b"\0")[0]:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


async def one(db: str, workers: int, singles: list[bytes], concurrency: int, token: str) -> dict:
    s = spec()
    proc, url = start(
        [sys.executable, "-m", "aggregator", "serve", "--db", db, "--port", "0", "--workers", str(workers)],
        env={**os.environ, "LDPNB_ADMIN_TOKEN": token},
    )
    try:
        await create(url, token, s, "single")
        await drive_raw(url, "/collections/single/reports", singles[:500], concurrency)
        service, database = descendants(proc.pid), postgres_pids()
        before = {p: cpu_seconds(p) for p in service + database}
        mine = os.times()
        wall = time.perf_counter()
        await drive_raw(url, "/collections/single/reports", singles[500:], concurrency)
        wall = time.perf_counter() - wall
        after_mine = os.times()
        used = {p: cpu_seconds(p) - before[p] for p in before}
    finally:
        proc.terminate()
        proc.wait()
    generator = (after_mine.user - mine.user) + (after_mine.system - mine.system)
    per_worker = sorted((used[p] / wall for p in service if used[p] > 0.01 * wall), reverse=True)
    return {
        "rate": (len(singles) - 500) / wall,
        "load generator": generator / wall,
        "service": sum(used[p] for p in service) / wall,
        "per process": per_worker,
        "postgres": sum(used[p] for p in database) / wall,
    }


async def main_async(args) -> None:
    token = secrets.token_urlsafe(24)
    singles = single_bodies(spec(), args.requests + 500)
    cores = os.cpu_count()
    print(f"{cores} cores; cores used = CPU seconds / wall seconds while {args.requests:,} single reports arrive")
    print()
    print("| in flight | workers | reports/s | load generator | service (per process) | PostgreSQL | idle |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        server, fresh = postgres_server(tmp)
        try:
            for concurrency in args.concurrency:
                for workers in (1, 2):
                    r = await one(fresh(), workers, singles, concurrency, token)
                    busy = r["load generator"] + r["service"] + r["postgres"]
                    each = " + ".join(f"{x:.2f}" for x in r["per process"])
                    print(
                        f"| {concurrency} | {workers} | {r['rate']:,.0f} | {r['load generator']:.2f} | "
                        f"{r['service']:.2f} ({each}) | {r['postgres']:.2f} | {max(cores - busy, 0):.2f} |",
                        flush=True,
                    )
        finally:
            server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
