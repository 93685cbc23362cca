"""What asking for the model of a wide collection costs the service, and everyone else meanwhile.

    python bench/wide_model.py [--baseline REV] [--backends sqlite,postgres]

Starts ``python -m aggregator serve --db-timeout 2`` and creates the 499 × 1,000 collection of
``bench/stall.py`` (998,002 model entries) with 200 reports. Then, each step with one new report
before it (so that no answer is cached), while a prober in another process asks ``/healthz``
every 20 ms:

1. one ``/model`` alone (JSON, ``normsub``): what one build costs;
2. thirty keys at once (each estimator and strength, JSON and msgpack): when the last is answered;
3. thirty keys whose clients leave after 0.3 s: ``/healthz`` over the next 6 s, and the CPU the
   service spends there (builds nobody waits for);
4. thirty keys, then SIGTERM half a second later: how long the process takes to end.

With ``--baseline REV`` the same runs first against the code at that commit (a ``git worktree``),
so that each figure has its ratio from one run. Writes ``bench/results/wide_model.md``. Only
127.0.0.1 is contacted; every server stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from stall import AUTH, MSGPACK, TOKEN, WIDE, Prober, free_port, probe_elsewhere  # noqa: E402

from participant import Participant  # noqa: E402
from participant.wire import pack_batch, pack_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("results") / "wide_model.md"
LEAVE_AFTER = 0.3  # seconds a leaving client waits for its answer
QUIET_SECONDS = 6.0


def keys() -> list[tuple[str, bool]]:
    """Thirty (path, msgpack?) keys on the wide collection: each estimator and strength, both formats."""
    from aggregator.estimation.smoothing import STRENGTHS

    paths = [f"/collections/wide/model?estimator={e}" for e in ("paper", "normsub", "ibu")]
    paths += [f"/collections/wide/model?estimator={e}&strength={s:g}" for e in ("normsub", "ibu") for s in STRENGTHS]
    both = [(p, fmt) for p in paths for fmt in (False, True)]
    return both[:30]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Service:
    """``python -m aggregator serve`` from ``code`` (a checkout) on ``db``."""

    def __init__(self, code: Path, db: str):
        self.code, self.db = code, db

    def __enter__(self) -> Service:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aggregator", "serve", "--db", self.db, "--port", str(self.port), "--db-timeout", "2"],
            cwd=self.code, env={**os.environ, "LDPNB_ADMIN_TOKEN": TOKEN, "PYTHONPATH": str(self.code)},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert "listening on" in self.proc.stdout.readline()
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


class Reports:
    """Fresh valid reports into the wide collection."""

    def __init__(self):
        self.participant = Participant(WIDE, rng=np.random.default_rng(0))
        self.names = [f.name for f in WIDE.features]
        self.sent = 0

    def record(self) -> dict:
        self.sent += 1
        return {**{n: "1" for n in self.names}, "class": "ab"[self.sent % 2]}

    async def post(self, session, url: str, count: int = 1) -> None:
        reports = [self.participant.report(self.record()) for _ in range(count)]
        body = pack_batch(reports, WIDE) if count > 1 else pack_report(reports[0], WIDE)
        async with session.post(f"{url}/collections/wide/reports", data=body, headers=MSGPACK) as r:
            assert r.status in (200, 201), await r.text()


async def ask(session, url: str, path: str, as_msgpack: bool, timeout: float) -> tuple[float, int | str, int]:
    """(seconds, status or what went wrong, bytes) of one model request."""
    start = time.perf_counter()
    headers = {"Accept": "application/msgpack"} if as_msgpack else {}
    try:
        async with session.get(url + path, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            body = await r.read()
            return time.perf_counter() - start, r.status, len(body)
    except TimeoutError:
        return time.perf_counter() - start, "left", 0


async def run(code: Path, db: str) -> dict:
    """The four steps against the service from ``code``; their figures."""
    out: dict = {}
    reports = Reports()
    with Service(code, db) as service:
        url = service.url
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{url}/collections", json={"spec": WIDE.to_dict(), "id": "wide", "min_reports": 0}, headers=AUTH
            ) as r:
                assert r.status == 201, await r.text()
            await reports.post(session, url, 200)
            # 1. One build alone.
            await reports.post(session, url)
            out["one"] = await ask(session, url, "/collections/wide/model?estimator=normsub", False, 120)
            # 2. Thirty keys at once.
            await reports.post(session, url)
            async with Prober(url) as prober:  # for as long as the thirty take
                out["thirty"] = await asyncio.gather(*(ask(session, url, p, m, 180) for p, m in keys()))
            out["thirty_probe"] = prober.latencies
            # 3. Thirty clients that leave.
            await reports.post(session, url)
            before = cpu_seconds(service.proc.pid)
            await asyncio.gather(*(ask(session, url, p, m, LEAVE_AFTER) for p, m in keys()))
            out["quiet"] = await probe_elsewhere(url, QUIET_SECONDS)
            out["quiet_cpu"] = cpu_seconds(service.proc.pid) - before
            # 4. SIGTERM while thirty keys are being built.
            await reports.post(session, url)
            asking = [asyncio.create_task(ask(session, url, p, m, 180)) for p, m in keys()]
            await asyncio.sleep(0.5)
            start = time.perf_counter()
            service.proc.terminate()
            while service.proc.poll() is None and time.perf_counter() - start < 120:
                await asyncio.sleep(0.05)
            out["sigterm"] = time.perf_counter() - start
            for task in asking:
                task.cancel()
            await asyncio.gather(*asking, return_exceptions=True)
    return out


def summary(out: dict) -> dict[str, str]:
    one_seconds, one_status, one_bytes = out["one"]
    thirty = out["thirty"]
    answered = [t for t, status, _ in thirty if status == 200]
    last = max(t for t, _, _ in thirty)
    statuses = sorted({str(s) for _, s, _ in thirty})
    quiet = np.array(out["quiet"]) * 1e3
    busy = np.array(out["thirty_probe"]) * 1e3
    return {
        "one build (JSON, normsub): s": f"{one_seconds:.2f}",
        "its answer: MB": f"{one_bytes / 1e6:.1f}",
        "thirty keys: last answered after, s": f"{last:.1f}",
        "thirty keys: answered 200": f"{len(answered)} of {len(thirty)} ({', '.join(statuses)})",
        "thirty keys: last / one build": f"{last / one_seconds:.1f}",
        "thirty keys: /healthz p99, worst (ms)": f"{np.percentile(busy, 99):.0f}, {busy.max():.0f}",
        "clients gone: /healthz answers in 6 s": f"{len(quiet)}",
        "clients gone: /healthz p99, worst (ms)": f"{np.percentile(quiet, 99):.0f}, {quiet.max():.0f}",
        "clients gone: service CPU over those 6 s": f"{out['quiet_cpu']:.1f} s",
        "SIGTERM to exit, s": f"{out['sigterm']:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="also measure the code at this commit, first")
    parser.add_argument("--backends", default="sqlite", help="sqlite, postgres or both (default sqlite)")
    args = parser.parse_args()
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        codes = [("this code", ROOT)]
        if args.baseline:
            baseline = Path(tmp) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=ROOT, check=True,
                           capture_output=True)  # fmt: skip
            codes.insert(0, (args.baseline, baseline))
        try:
            for backend in args.backends.split(","):
                columns = {}
                for name, code in codes:
                    if backend == "sqlite":
                        db = f"{tmp}/{name.replace(' ', '-')}.sqlite3"
                        columns[name] = summary(asyncio.run(run(code, db)))
                    else:
                        from ingest import postgres_server

                        server, fresh = postgres_server(tmp)
                        try:
                            columns[name] = summary(asyncio.run(run(code, fresh())))
                        finally:
                            server.cleanup()
                    print(name, backend, columns[name], flush=True)
                names = list(columns)
                sections += [f"## {'SQLite' if backend == 'sqlite' else 'PostgreSQL (the pgserver wheel)'}", "",
                             "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]  # fmt: skip
                for row in columns[names[0]]:
                    sections.append(f"| {row} | " + " | ".join(columns[n][row] for n in names) + " |")
                sections.append("")
        finally:
            if args.baseline:
                subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, capture_output=True)
    lines = [
        f"# The model of a 499 x 1,000 collection (`python bench/wide_model.py{' --baseline ' + args.baseline if args.baseline else ''}`)",
        "",
        "Each step follows a new report, so no answer is cached. Goal (issue 65): thirty keys all answered "
        "within 3x one build, `/healthz` p99 <= 50 ms and worst <= 100 ms, SIGTERM to exit <= 5 s.",
        "",
        *sections,
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
