"""Ingest through a shuffler beside direct batched ingest, in one run.

    python bench/shuffled_ingest.py [--reports 50000] [--batch 5000] [--rounds 3]

Starts ``python -m aggregator serve`` (SQLite) and ``python -m shuffler serve`` in their own
processes. Each round, into a fresh collection of one spec (OUE, 3 features, 2 classes):

- *direct*: the reports posted to the aggregator in batches of ``--batch``, timed from the first
  request to the last answer (every report then counted);
- *through the shuffler*: the same number of reports, each sealed (HPKE) before the round
  starts, posted to the shuffler in batches of ``--batch``, timed from the first request until
  the aggregator has counted them all (the shuffler releases every 0.2 s, batches of at least
  1,000; the aggregator opens every report).

Also times opening alone (``participant.sealing.open_sealed``, one core), the bound on what any
shuffled ingest can reach here. Writes ``bench/results/shuffled_ingest.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import msgpack
import numpy as np

from participant import CollectionSpec, Feature, Participant
from participant.sealing import new_key_pair, open_sealed, seal
from participant.wire import pack_report

RESULTS = Path(__file__).with_name("results") / "shuffled_ingest.md"
SPEC = CollectionSpec(
    [Feature("a", ["x", "y", "z"]), Feature("b", ["x", "y"]), Feature("c", [str(i) for i in range(6)])],
    ["yes", "no"], "OUE", 2.0,
)  # fmt: skip
ADMIN = secrets.token_urlsafe(24)


def start(command: list[str], env: dict | None = None) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = process.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"did not start: {' '.join(command)}: {line}")
    return process, line.split("listening on ")[1].split()[0]


def call(url: str, method: str = "GET", body=None, headers: dict | None = None, raw: bytes | None = None) -> dict:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.load(answer)


def reports(spec: CollectionSpec, n: int) -> list[bytes]:
    """``n`` packed reports of ``spec`` (seeded: the simulator's draws, not a device's)."""
    participant = Participant(spec, rng=np.random.default_rng(0))
    record = {"a": "x", "b": "y", "c": "3", "class": "yes"}
    return [pack_report(participant.report(record), spec) for _ in range(n)]


def counted(url: str, cid: str) -> int:
    return call(f"{url}/collections/{cid}/status", headers={"Authorization": f"Bearer {ADMIN}"})["reports"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        token = secrets.token_urlsafe(32)
        token_path = Path(tmp) / "token.txt"
        token_path.write_text(token + "\n")
        token_path.chmod(0o600)
        env = {**os.environ, "LDPNB_ADMIN_TOKEN": ADMIN}
        aggregator, url = start([sys.executable, "-m", "aggregator", "serve", "--db", f"{tmp}/a.sqlite3", "--port", "0"], env)
        shuffler, shuffler_url = start([sys.executable, "-m", "shuffler", "serve", "--aggregator", url, "--token-file",
                                        str(token_path), "--db", f"{tmp}/s.sqlite3", "--port", "0", "--interval", "0.2",
                                        "--min-batch", "1000"])  # fmt: skip
        auth = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
        packed = reports(SPEC, args.reports)
        direct, shuffled = [], []
        try:
            for r in range(args.rounds):
                cid = f"direct{r}"
                call(f"{url}/collections", "POST", {"spec": SPEC.to_dict(), "id": cid, "min_reports": 0}, auth)
                started = time.perf_counter()
                for i in range(0, len(packed), args.batch):
                    body = msgpack.packb({"reports": [msgpack.unpackb(p) for p in packed[i : i + args.batch]]})
                    call(f"{url}/collections/{cid}/reports", "POST", raw=body, headers={"Content-Type": "application/msgpack"})
                direct.append(args.reports / (time.perf_counter() - started))
                cid = f"shuffled{r}"
                shuffle = {"url": shuffler_url, "token": token, "min_batch": 1000}
                call(f"{url}/collections", "POST", {"spec": SPEC.to_dict(), "id": cid, "min_reports": 0, "shuffler": shuffle}, auth)
                published = call(f"{url}/collections/{cid}")
                spec = CollectionSpec.from_dict(published["spec"])
                sealed = [seal(p, spec, published["uid"]) for p in reports(spec, args.reports)]
                started = time.perf_counter()
                for i in range(0, len(sealed), args.batch):
                    call(f"{shuffler_url}/collections/{cid}/reports", "POST", raw=msgpack.packb({"reports": sealed[i : i + args.batch]}),
                         headers={"Content-Type": "application/msgpack"})  # fmt: skip
                while counted(url, cid) < args.reports:
                    time.sleep(0.05)
                shuffled.append(args.reports / (time.perf_counter() - started))
                print(f"round {r}: direct {direct[-1]:,.0f}/s, through the shuffler {shuffled[-1]:,.0f}/s", flush=True)
        finally:
            shuffler.terminate()
            aggregator.terminate()
            shuffler.wait()
            aggregator.wait()
    private, public = new_key_pair()
    key = {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": public.hex()}
    spec = CollectionSpec.from_dict({**SPEC.to_dict(), "shuffle": {"min_batch": 2, "delta": 1e-3, "url": "http://x", "key": key}})
    opened = [seal(p, spec, "u" * 32) for p in packed[:2000]]
    started = time.perf_counter()
    for item in opened:
        open_sealed(item, spec, "u" * 32, private)
    per_open = (time.perf_counter() - started) / len(opened)
    ratio = np.median(shuffled) / np.median(direct)
    lines = [
        f"# Ingest through a shuffler (`python bench/shuffled_ingest.py --reports {args.reports} --batch {args.batch} "
        f"--rounds {args.rounds}`)",
        "",
        "| path | reports/s (median) | rounds |",
        "|---|---|---|",
        f"| direct, batches of {args.batch:,} | {np.median(direct):,.0f} | {', '.join(f'{x:,.0f}' for x in direct)} |",
        f"| through the shuffler, batches of {args.batch:,} | {np.median(shuffled):,.0f} | {', '.join(f'{x:,.0f}' for x in shuffled)} |",
        "",
        f"Through the shuffler: {ratio:.0%} of direct batched ingest. Opening one sealed report takes {per_open * 1e6:.0f} µs on "
        f"one core (cryptography's HPKE: X25519, HKDF-SHA256, AES-128-GCM), so no shuffled ingest here can pass "
        f"{1 / per_open:,.0f} reports/s on a core: {1 / per_open / np.median(direct):.0%} of the direct figure.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
