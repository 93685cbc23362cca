"""Shuffled ingest as devices do it (one sealed report per request), beside direct ingest, in one run.

    python bench/shuffled_ingest.py [--people 50000] [--concurrency 64] [--rounds 3] [--min-batch 5000]
                                    [--dbs sqlite,postgresql] [--clients 5000]

For each database the aggregator runs on (SQLite, and PostgreSQL from the ``pgserver`` wheel),
each round starts ``python -m aggregator serve`` and ``python -m shuffler serve`` (its own SQLite
file, releasing every 0.2 s) in their own processes, and measures into fresh collections of one
spec (OUE, 3 features, 2 classes):

- *direct, batches*: ``--people`` reports posted to the aggregator in batches of 5,000 (8 in flight);
- *direct, singles*: one report per request, ``--concurrency`` in flight (the lean load generator
  of ``bench/ingest.py``);
- *shuffled, singles*: each person's report sealed (HPKE) before the round, one per request to
  the shuffler, ``--concurrency`` in flight: the shuffler's intake (until every post is answered,
  and each answer's latency) and end to end (until the aggregator has counted every person's
  report and the batches' dummies), with the default dummies (as many as the floor) and with none.

Then, once per database, ``--clients`` sealed reports sent through the participant libraries'
own senders, 64 at a time: Python's ``AsyncClient.send_report`` and Node's ``Client.sendReport``.
With ``--baseline REF`` (a git revision), each SQLite round also runs that revision's own
``bench/shuffled_ingest.py`` in a worktree of it (its servers, its sealing) for its batches posted
to the shuffler: the same path measured by the code before, in the same run.
And, on this machine alone, what opening costs: one core with the key's object built once, and the
aggregator's opening processes against their number. Writes ``bench/results/shuffled_ingest.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import msgpack
import numpy as np
from ingest import drive, drive_raw, postgres_server, reports, spec, start

from participant.client import AsyncClient
from participant.sealing import new_key_pair, open_many, seal, sealed_length
from participant.view import ShuffledView
from participant.wire import pack_batch, pack_report

RESULTS = Path(__file__).with_name("results") / "shuffled_ingest.md"
JS = Path(__file__).resolve().parent.parent / "participant-js"
SEALED = "application/ldpnb-sealed"
NODE_SENDER = """
import { readFileSync } from "node:fs";
import { Client, Ledger } from "%s/dist/src/index.js";
const [shuffler, cid, file, concurrency] = process.argv.slice(2);
const bodies = JSON.parse(readFileSync(file, "utf8")).map((hex) => Uint8Array.from(Buffer.from(hex, "hex")));
const client = new Client(shuffler, { ledger: new Ledger({ update: async () => { throw new Error("no ledger"); } }) });
let next = 0;
const start = performance.now();
await Promise.all(Array.from({ length: Number(concurrency) }, async () => {
  while (next < bodies.length) await client.sendReport(cid, bodies[next++], shuffler);
}));
console.log(JSON.stringify((performance.now() - start) / 1000));
"""


def call(url: str, method: str = "GET", body=None, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers), timeout=300) as answer:
        return json.load(answer)


class System:
    """An aggregator on ``db`` and ``instances`` shufflers in front of it (on ``shuffler_db``, a
    PostgreSQL URL they share, else a SQLite file of the first's own), started for one round."""

    def __init__(self, db: str | None, tmp: str, admin: str, interval: float = 0.2, aggregator=None,
                 shuffler_db: str | None = None, instances: int = 1):  # fmt: skip
        self.admin, self.token, self.interval = admin, secrets.token_urlsafe(32), interval
        token_file = os.path.join(tmp, f"token-{secrets.token_hex(4)}")
        with open(token_file, "w") as f:
            f.write(self.token + "\n")
        os.chmod(token_file, 0o600)
        if aggregator is None:
            self.aggregator, self.url = start(
                [sys.executable, "-m", "aggregator", "serve", "--db", db, "--port", "0"], env={**os.environ, "LDPNB_ADMIN_TOKEN": admin}
            )
        else:  # another shuffler before a running aggregator
            self.aggregator, self.url = aggregator
        store = shuffler_db or os.path.join(tmp, f"shuffler-{secrets.token_hex(4)}.sqlite3")
        self.shufflers = [
            start([
                sys.executable, "-m", "shuffler", "serve", "--aggregator", self.url, "--token-file", token_file, "--db",
                store, "--port", "0", "--interval", str(self.interval), "--min-batch", "2", "--dummies", "0", "--per-address", "0",
                "--per-collection", "0", "--max-waiting", "10000000", "--max-post", "5000",
            ])  # fmt: skip
            for _ in range(instances)
        ]
        self.shuffler, self.shuffler_url = self.shufflers[0]

    def create(self, cid: str, min_batch: int | None = None, dummies: int | None = None) -> None:
        body = {"spec": spec().to_dict(), "id": cid, "min_reports": 0}
        if min_batch is not None:
            body["shuffler"] = {"url": self.shuffler_url, "token": self.token, "min_batch": min_batch}
            if dummies is not None:
                body["shuffler"]["dummies"] = dummies
        call(f"{self.url}/collections", "POST", body, self.admin)

    def view(self, cid: str) -> ShuffledView:
        return ShuffledView.from_dict(call(f"{self.shuffler_url}/collections/{cid}/view"))

    def forwarded(self, cid: str) -> int:
        return call(f"{self.shuffler_url}/collections/{cid}")["forwarded"]

    def batches(self, cid: str) -> dict:
        return call(f"{self.url}/collections/{cid}/status", token=self.admin)["batches"]

    def counted(self, cid: str) -> int:
        """Reports counted (the listing's one query, not a status's statistics)."""
        listing = call(f"{self.url}/collections?limit=1000", token=self.admin)["collections"]
        return next(c["reports"] for c in listing if c["id"] == cid)

    def stop_shuffler(self) -> None:
        for process, _ in self.shufflers:
            process.terminate()
            process.wait()

    def stop(self) -> None:
        self.stop_shuffler()
        self.aggregator.terminate()
        self.aggregator.wait()


def sealed_bodies(view: ShuffledView, drawn: list) -> list[bytes]:
    """Each report of ``drawn`` packed for the spec the view holds (its shuffle block is part of
    the spec's digest: a report packed for another spec opens as junk) and sealed under it."""
    return [seal(pack_report(report, view.spec), view) for report in drawn]


async def drive_spread(urls: list[str], path: str, bodies: list[bytes], concurrency: int) -> float:
    """Seconds to post ``bodies`` spread evenly over the shuffler instances at ``urls`` (as a load
    balancer would), ``concurrency`` in flight in all."""
    start_time = time.perf_counter()
    share = -(-len(bodies) // len(urls))
    await asyncio.gather(*(
        drive_raw(url, path, bodies[i * share : (i + 1) * share], max(1, concurrency // len(urls)), SEALED)
        for i, url in enumerate(urls)
    ))  # fmt: skip
    return time.perf_counter() - start_time


async def until(condition, timeout: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await asyncio.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process and its children (opening and drawing processes) have used so far."""
    import psutil

    process = psutil.Process(pid)
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


async def shuffled_round(
    system: System, cid: str, drawn: list, concurrency: int, min_batch: int, dummies: int, batch: int = 0
) -> dict:
    """Sealed reports into the shuffler (one per request, or ``batch`` per request): intake and
    end-to-end rates, intake latencies, and the CPU seconds per person's report each process took."""
    system.create(cid, min_batch, dummies)
    view = system.view(cid)
    bodies = sealed_bodies(view, drawn)
    latencies: list[float] = []
    before = {name: cpu_seconds(p.pid) for name, p in (("aggregator", system.aggregator), ("shuffler", system.shuffler))}
    load_before = time.process_time()
    start_time = time.perf_counter()
    if batch:
        posts = [msgpack.packb({"reports": bodies[i : i + batch]}) for i in range(0, len(bodies), batch)]
        intake = await drive(system.shuffler_url, f"/collections/{cid}/reports", posts, 8)
    else:
        intake = await drive_raw(system.shuffler_url, f"/collections/{cid}/reports", bodies, concurrency, SEALED, latencies)
    # Forwarded once what is left is too few for a batch; counted once the aggregator's batches hold them.
    await until(lambda: len(bodies) - system.forwarded(cid) < view.min_batch)
    forwarded = system.forwarded(cid)

    def people() -> tuple[int, int]:
        batches = system.batches(cid)
        return batches["reports"] - batches["dummies"] - batches["junk"], batches["junk"]

    await until(lambda: sum(people()) >= forwarded)
    total = time.perf_counter() - start_time
    counted, junk = people()
    if counted != forwarded or junk:  # a rate of junk is no rate: say so and stop
        raise RuntimeError(f"{cid}: {counted} people counted of {forwarded} forwarded, {junk} junk")
    cpu = {name: (cpu_seconds(p.pid) - before[name]) / forwarded for name, p in (("aggregator", system.aggregator), ("shuffler", system.shuffler))}
    cpu["load generator"] = (time.process_time() - load_before) / forwarded
    return {"intake": len(bodies) / intake, "end_to_end": forwarded / total, "p99": float(np.percentile(latencies or [0], 99)),
            "forwarded": forwarded, "dummies": view.dummies, "cpu": cpu}  # fmt: skip


async def python_clients(url: str, cid: str, bodies: list[bytes], concurrency: int) -> float:
    """Reports/s of the Python participant's own sender, ``concurrency`` at a time."""
    it = iter(bodies)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        client = AsyncClient(url, ledger=None, session=session, retries=3, backoff=0.05)

        async def worker():
            for body in it:
                await client.send_report(cid, body, url)

        start_time = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(bodies) / (time.perf_counter() - start_time)


def node_clients(url: str, cid: str, bodies: list[bytes], concurrency: int, tmp: str) -> float:
    """Reports/s of the Node participant's own sender, ``concurrency`` at a time."""
    script, data = os.path.join(tmp, "send.mjs"), os.path.join(tmp, "bodies.json")
    Path(script).write_text(NODE_SENDER % JS)
    Path(data).write_text(json.dumps([b.hex() for b in bodies]))
    out = subprocess.run(["node", script, url, cid, data, str(concurrency)], capture_output=True, text=True, check=True)
    return len(bodies) / float(out.stdout)


def baseline_rate(ref: str, people: int, tmp: str) -> float:
    """Reports/s of batches posted to the shuffler until counted, as revision ``ref``'s own bench
    measures it (its servers and sealing, from a worktree of it)."""
    root = Path(__file__).resolve().parent.parent
    tree = Path(tmp) / f"baseline-{ref}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(
        [sys.executable, "bench/shuffled_ingest.py", "--reports", str(people), "--batch", "5000", "--rounds", "1"],
        cwd=tree, env=env, check=True, capture_output=True,
    )
    table = (tree / "bench" / "results" / "shuffled_ingest.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| through the shuffler"))
    return float(row.split("|")[2].replace(",", ""))


def opening_costs(length_spec, n: int = 4000) -> tuple[float, dict[int, float]]:
    """Seconds to open one report on one core (the key's object built once), and reports/s the
    aggregator's opening processes reach against their number."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    raw, public = new_key_pair()
    shuffle = {"min_batch": 1000, "delta": 1e-6, "url": "http://x", "key": {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": public.hex()}}
    s = type(length_spec).from_dict({**length_spec.to_dict(), "shuffle": shuffle})
    view = ShuffledView("c", "u" * 32, s, 1000, 0)
    bodies = sealed_bodies(view, reports(s, n))
    length = sealed_length(s)
    open_many(raw, view.digest, length, bodies[:10])  # the key's object built
    start_time = time.perf_counter()
    open_many(raw, view.digest, length, bodies)
    one = (time.perf_counter() - start_time) / n
    curve = {}
    for processes in range(1, (os.cpu_count() or 1) + 1):
        with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
            list(pool.map(open_many, [raw] * processes, [view.digest] * processes, [length] * processes, [bodies[:64]] * processes))
            step = -(-len(bodies) // processes)
            start_time = time.perf_counter()
            parts = [bodies[i : i + step] for i in range(0, len(bodies), step)]
            list(pool.map(open_many, [raw] * len(parts), [view.digest] * len(parts), [length] * len(parts), parts))
            curve[processes] = len(bodies) / (time.perf_counter() - start_time)
    return one, curve


async def main_async(args) -> list[str]:
    s = spec()
    drawn = reports(s, args.people)
    batches = [pack_batch(reports(s, 5000, seed=1 + b), s) for b in range(max(1, args.people // 5000))]
    singles = [pack_report(r, s) for r in drawn]
    admin = secrets.token_urlsafe(24)
    table: dict[str, dict[str, list]] = {}
    clients: dict[str, tuple[float, float]] = {}
    cpu: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pg, fresh = postgres_server(tmp) if "postgresql" in args.dbs else (None, None)
        try:
            for name in args.dbs:
                rows = table.setdefault(name, {})
                for round_ in range(args.rounds):
                    db = os.path.join(tmp, f"bench-{round_}.sqlite3") if name == "sqlite" else fresh()
                    shuffler_db = None if name == "sqlite" else fresh()  # the shuffler on the same kind of database
                    system = System(db, tmp, admin, shuffler_db=shuffler_db)
                    try:
                        system.create("batched")
                        seconds = await drive(system.url, "/collections/batched/reports", batches, 8)
                        rows.setdefault("direct, batches of 5,000", []).append(5000 * len(batches) / seconds)
                        system.create("single")
                        seconds = await drive_raw(system.url, "/collections/single/reports", singles, args.concurrency)
                        rows.setdefault("direct, singles", []).append(len(singles) / seconds)
                        # The shuffler's intake alone: a shuffler that releases nothing meanwhile.
                        for instances in (1, 2) if name == "postgresql" else (1,):
                            idle = System(None, tmp, admin, interval=3600, aggregator=(system.aggregator, system.url),
                                          shuffler_db=None if name == "sqlite" else fresh(), instances=instances)  # fmt: skip
                            try:
                                cid = f"intake{instances}"
                                idle.create(cid, args.min_batch, 0)
                                bodies = sealed_bodies(idle.view(cid), drawn)
                                seconds = await drive_spread([u for _, u in idle.shufflers], f"/collections/{cid}/reports", bodies, args.concurrency)
                                label = "the shuffler's intake alone" + (f", {instances} instances" if instances > 1 else "")
                                rows.setdefault(f"shuffled singles: {label}", []).append(len(bodies) / seconds)
                            finally:
                                idle.stop_shuffler()
                        for label, dummies in (("default dummies", None), ("no dummies", 0)):
                            found = await shuffled_round(
                                system, f"shuffled-{label[:2]}", drawn, args.concurrency, args.min_batch, dummies
                            )
                            rows.setdefault(f"shuffled singles ({label}): intake", []).append(found["intake"])
                            rows.setdefault(f"shuffled singles ({label}): until counted", []).append(found["end_to_end"])
                            rows.setdefault(f"shuffled singles ({label}): intake p99 ms", []).append(1000 * found["p99"])
                            cpu.setdefault((name, label), []).append(found["cpu"])
                        found = await shuffled_round(system, "posted", drawn, args.concurrency, args.min_batch, 0, batch=5000)
                        rows.setdefault("shuffled, batches of 5,000 posted (no dummies): until counted", []).append(found["end_to_end"])
                        if args.baseline and name == "sqlite":
                            rate = await asyncio.to_thread(baseline_rate, args.baseline, args.people, tmp)
                            rows.setdefault(f"the same at {args.baseline} (its own bench, servers and sealing)", []).append(rate)
                        if round_ == 0:
                            system.create("clients", 2, 0)
                            view = system.view("clients")
                            bodies = sealed_bodies(view, drawn[: args.clients])
                            python = await python_clients(system.shuffler_url, "clients", bodies, 64)
                            system.create("node", 2, 0)
                            node_bodies = sealed_bodies(system.view("node"), drawn[: args.clients])
                            node = await asyncio.to_thread(node_clients, system.shuffler_url, "node", node_bodies, 64, tmp)
                            clients[name] = (python, node)
                    finally:
                        system.stop()
                    print(name, {k: f"{v[-1]:,.0f}" for k, v in rows.items()}, flush=True)
        finally:
            if pg is not None:
                pg.cleanup()
            if args.baseline:  # the worktree goes with the run's folder
                tree = os.path.join(tmp, f"baseline-{args.baseline}")
                subprocess.run(["git", "worktree", "remove", "--force", tree], check=False, capture_output=True)
    one, curve = opening_costs(s)
    lines = [
        f"# Shuffled ingest as devices do it (`python bench/shuffled_ingest.py --people {args.people} --concurrency "
        f"{args.concurrency} --rounds {args.rounds} --min-batch {args.min_batch}`)",
        "",
        f"{args.people:,} people, one report each; {args.rounds} rounds per database, medians (and every round). Shuffled "
        f"collections release in batches of {args.min_batch:,} people's reports, with the default dummies (as many) or "
        "none; *until counted* is people's reports per second from the first post until the aggregator counted the "
        "last batch (the remainder below a batch is left out of both). The shuffler keeps its reports in the same kind "
        "of database as the aggregator (its own SQLite file, or its own PostgreSQL database on the same server).",
        "",
        "| path | " + " | ".join(f"{n}: reports/s" for n in args.dbs) + " |",
        "|---|" + "---|" * len(args.dbs),
    ]
    labels = list(dict.fromkeys(label for name in args.dbs for label in table[name]))
    for label in labels:
        cells = []
        for name in args.dbs:
            values = table[name].get(label)
            unit = "{:,.1f}" if "ms" in label else "{:,.0f}"
            cells.append(f"{unit.format(np.median(values))} ({', '.join(unit.format(v) for v in values)})" if values else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "CPU per person's report counted, end to end with single reports (µs, medians over the rounds; the load "
        "generator is this benchmark's own process; PostgreSQL's own processes are not counted). Two cores give at "
        "most 2·10⁶ µs a second, so the sum bounds the rate any scheduling could reach here:",
        "",
        "| database, dummies | aggregator | shuffler | load generator | sum | bound, reports/s |",
        "|---|---|---|---|---|---|",
    ]
    for (name, label), runs in cpu.items():
        parts = {k: 1e6 * float(np.median([r[k] for r in runs])) for k in runs[0]}
        total = sum(parts.values())
        lines.append(
            f"| {name}, {label} | {parts['aggregator']:.0f} | {parts['shuffler']:.0f} | {parts['load generator']:.0f} "
            f"| {total:.0f} | {2e6 / total:,.0f} |"
        )
    lines += [
        "",
        "Single sealed reports through the participant libraries' own senders (64 at a time, "
        f"{args.clients:,} reports, shuffler intake): "
        + "; ".join(f"{n}: Python {p:,.0f}/s, Node {q:,.0f}/s" for n, (p, q) in clients.items()) + ".",
        "",
        f"Opening one sealed report takes {one * 1e6:.0f} µs on one core (cryptography's HPKE, the key's object built "
        "once). The aggregator's opening processes against their number (reports/s, batches cut in one slice per "
        "process): " + ", ".join(f"{k}: {v:,.0f}" for k, v in curve.items()) + ".",
    ]
    return lines


async def one_round_async(args) -> list[str]:
    """``--one-round``: the shuffled path alone, as a survey at scale runs it: ``args.people``
    single sealed reports into one collection on SQLite with the shuffler's default dummies,
    counted (people counted = people forwarded, no junk: else no rate), with the CPU each process
    took per person."""
    s = spec()
    drawn = reports(s, args.people)
    with tempfile.TemporaryDirectory() as tmp:
        system = System(os.path.join(tmp, "aggregator.sqlite3"), tmp, secrets.token_urlsafe(24))
        try:
            started = time.perf_counter()
            found = await shuffled_round(system, "survey", drawn, args.concurrency, args.min_batch, None)
            wall = time.perf_counter() - started
        finally:
            system.stop()
    cpu = found["cpu"]
    return [
        f"# {args.people:,} people through the shuffler (`python bench/shuffled_ingest.py --one-round --people "
        f"{args.people} --min-batch {args.min_batch} --concurrency {args.concurrency}`)",
        "",
        f"One collection on SQLite, one sealed report per person, {args.concurrency} in flight, batches of "
        f"{args.min_batch:,} people with the shuffler's default dummies ({found['dummies']:,} a batch). Every "
        f"person forwarded was counted by the aggregator as a person (people counted = {found['forwarded']:,} "
        "forwarded, no junk) before a rate was taken; the remainder below a batch waits, as it would.",
        "",
        "| what | figure |",
        "|---|---|",
        f"| people counted | {found['forwarded']:,} |",
        f"| intake, people/s | {found['intake']:,.0f} |",
        f"| until counted, people/s | {found['end_to_end']:,.0f} |",
        f"| intake p99 ms | {1000 * found['p99']:.1f} |",
        f"| wall time, sealing included | {wall:,.0f} s |",
        f"| CPU per person: aggregator (with its opening processes) | {1e6 * cpu['aggregator']:.0f} µs |",
        f"| CPU per person: shuffler | {1e6 * cpu['shuffler']:.0f} µs |",
        f"| CPU per person: load generator | {1e6 * cpu['load generator']:.0f} µs |",
        f"| bound on two cores (2·10⁶ µs / sum) | {2e6 / (1e6 * sum(cpu.values())):,.0f} people/s |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-batch", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--dbs", type=lambda t: t.split(","), default=["sqlite", "postgresql"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline", metavar="REF", help="also measure revision REF's batches posted to the shuffler (a git revision)")
    parser.add_argument("--one-round", action="store_true",
                        help="only the shuffled path with default dummies on SQLite, once (for a million people); "
                        "written to results/shuffled_one_round.md unless --out")  # fmt: skip
    args = parser.parse_args()
    if args.one_round:
        if args.out == RESULTS:
            args.out = RESULTS.with_name("shuffled_one_round.md")
        lines = asyncio.run(one_round_async(args))
        args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    lines = asyncio.run(main_async(args))
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
