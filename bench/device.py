"""What the device spends in time and memory: one report, a unit of a draw's work, and a spec it refuses.

    python bench/device.py [--reports 2000]

1. For each spec in ``sim/specs`` (its protocol as shipped, ``auto`` for the discrete ones), builds
   one participant and times ``--reports`` reports of records drawn from the data set, after a
   warm-up: the median and the 99th percentile per report, with the secure samplers (the OS
   CSPRNG, exact coins). The client paces the send separately (``participant.client.DEFAULT_PACE``).
2. The units of :mod:`participant.limits`' draw-time estimate: one exact discrete Laplace sample
   (a SHE report of 2,000 entries, per entry) and one 64-bit coin word (an OUE report of 10^6
   entries, per entry), beside the constants the device estimates with.
3. Specs a hostile service may publish, over the default :class:`~participant.Limits`: the time
   and peak traced memory of reading the answer and refusing it (``Published.from_answer``).
4. The same units for the JavaScript device in Node (``participant-js``, built with ``npm ci &&
   npm run build``), beside what it estimates with after measuring itself.
5. One submit's ledger work (claim a fresh 8 KiB report, record it, mark it sent) against the
   largest ledger a year of daily collections leaves (365 questions, each answered with an 8 KiB
   OUE report, the largest the default limits allow), in Python and in Node: the median of 5.

Writes ``bench/results/device.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgpack
import numpy as np

from participant import CollectionSpec, LimitExceeded, Participant, SecureGenerator
from participant.client import Published
from participant.ledger import Asked, Ledger, Limits
from participant.limits import SECONDS_PER_COIN, SECONDS_PER_NOISE
from protocols.histogram import SummationHistogramEncoding
from protocols.unary import OptimisedUnaryEncoding
from sim.datasets import load_dataset

SPECS = Path(__file__).resolve().parents[1] / "sim" / "specs"
RESULTS = Path(__file__).with_name("results") / "device.md"


def records(name: str, spec: CollectionSpec, count: int) -> list[dict]:
    data = load_dataset(name)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(data.y), count)
    names = [f.name for f in (spec.continuous.inputs if spec.continuous else spec.features)]
    return [{**dict(zip(names, data.X[r])), spec.label: data.y[r]} for r in rows]


def per_entry(mechanism, repeats: int = 5) -> float:
    """Seconds per entry of one report of ``mechanism`` drawn with the secure samplers (the median of ``repeats``)."""
    rng = SecureGenerator()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mechanism.perturb(np.array([0]), rng)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / mechanism.domain_size


def hostile_specs() -> dict[str, dict]:
    """Specs over the default limits, as a service publishes them (raw mappings)."""
    many = [f"v{i}" for i in range(10_000)]
    return {
        "OUE, 10^4 classes x 10^4 categories (10^8 entries)": {
            "features": [{"name": "f", "categories": many}], "classes": many, "protocol": "OUE", "epsilon": 1.0},
        "auto, the same": {"features": [{"name": "f", "categories": many}], "classes": many, "protocol": "auto",
                           "epsilon": 1.0},
        "OUE, 1,000 classes x 1,000 categories (10^6 in one input)": {
            "features": [{"name": "f", "categories": many[:1000]}], "classes": many[:1000], "protocol": "OUE",
            "epsilon": 1.0},
        "SHE, 4 classes x 10,000 categories (a draw estimated at 4 s)": {
            "features": [{"name": "f", "categories": many}],
            "classes": ["a", "b", "c", "d"], "protocol": "SHE", "epsilon": 1.0},
        "2,000 continuous outputs of 10^4 bins": {
            "continuous": {"inputs": [{"name": f"x{i}", "low": 0, "high": 1} for i in range(2000)], "bins": 10_000},
            "classes": ["a", "b"], "protocol": "OUE", "epsilon": 1.0},
    }  # fmt: skip


def refusal(spec: dict) -> tuple[float, float, str]:
    """``(seconds, peak traced bytes, message)`` of reading a service's answer with ``spec`` and
    refusing it: the time untraced (the median of five), the memory in a traced sixth run."""
    body = msgpack.packb({"id": "c1", "uid": "u" * 32, "spec": spec, "fingerprint": "f" * 64})

    def refuse() -> str:
        try:
            Published.from_answer(msgpack.unpackb(body))
        except LimitExceeded as refused:
            return str(refused)
        raise AssertionError("a spec over the limits was accepted")

    times = []
    for _ in range(5):
        start = time.perf_counter()
        message = refuse()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    refuse()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return float(np.median(times)), peak, message


JS = Path(__file__).resolve().parents[1] / "participant-js"

JS_UNITS = """
import { makeOracle, SecureRandom } from "./dist/src/index.js";
import { secondsPerEntry } from "./dist/src/calibration.js";
const source = new SecureRandom();
function perEntry(oracle, d) {
  oracle.perturb(0, source);
  const times = [];
  for (let i = 0; i < 5; i++) { const t = performance.now(); oracle.perturb(0, source); times.push(performance.now() - t); }
  times.sort((a, b) => a - b);
  return times[2] / 1000 / d;
}
console.log(JSON.stringify({ noise: perEntry(makeOracle("SHE", 1, 2000), 2000),
  coins: perEntry(makeOracle("OUE", 1, 1000000), 1000000), estimate: secondsPerEntry() }));
"""

JS_LEDGER = """
import { Limits } from "./dist/src/index.js";
import { fileLedger } from "./dist/src/node.js";
const timings = [];
for (const [i, path] of process.argv.slice(1).entries()) {
  const ledger = fileLedger(path);
  const asked = { origin: "http://x.example", collection: `today${i}`, uid: "t".repeat(32), fingerprint: "f".repeat(64),
                  epsilon: 0.25, question: "t".repeat(64), group: null };
  const start = performance.now();
  const claim = await ledger.claim(asked, new Limits(), () => crypto.getRandomValues(new Uint8Array(8192)), (old) => old);
  await ledger.markSent(claim.key);
  timings.push((performance.now() - start) / 1000);
}
console.log(JSON.stringify(timings));
"""


def node(script: str, *args: str) -> object:
    """What a Node script run in participant-js/ prints (JSON)."""
    result = subprocess.run(["node", "--input-type=module", "-e", script, *args], cwd=JS, capture_output=True,
                            text=True, timeout=600, check=True)  # fmt: skip
    return json.loads(result.stdout)


def year_of_daily_collections(path: Path) -> None:
    """The largest ledger a year of daily collections leaves: one new question a day at ε 0.25,
    each answered with an 8 KiB report, written by the device day by day (expired entries leave)."""
    ledger, limits, body = Ledger(path), Limits(), os.urandom(8 * 1024 + 40)
    start, real = time.time() - 365 * 86_400, time.time
    try:
        for day in range(365):
            time.time = lambda day=day: start + day * 86_400
            asked = Asked("http://x.example", f"day{day}", f"{day:032d}", "f" * 64, 0.25, f"{day:064d}")
            ledger.mark_sent(ledger.claim(asked, limits, lambda: body, lambda old: old).key)
    finally:
        time.time = real


def ledger_submits(year: Path, scratch: Path) -> tuple[list[float], list[float]]:
    """Seconds of one submit's ledger work on copies of ``year``: five in Python, five in Node."""
    python = []
    for i in range(5):
        shutil.copy(year, scratch / f"py{i}.json")
        ledger = Ledger(scratch / f"py{i}.json")
        asked = Asked("http://x.example", f"today{i}", "t" * 32, "f" * 64, 0.25, "t" * 64)
        started = time.perf_counter()
        ledger.mark_sent(ledger.claim(asked, Limits(), lambda: os.urandom(8192), lambda old: old).key)
        python.append(time.perf_counter() - started)
    copies = []
    for i in range(5):
        copies.append(str(scratch / f"js{i}.json"))
        shutil.copy(year, copies[-1])
    return python, node(JS_LEDGER, *copies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=2000)
    args = parser.parse_args()
    lines = [
        f"# One report on the device (`python bench/device.py --reports {args.reports}`)",
        "",
        "| spec | protocol | inputs | median | 99th percentile |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(SPECS.glob("*.json")):
        spec = CollectionSpec.from_json(path.read_text())
        participant = Participant(spec)
        batch = records(path.stem, spec, args.reports)
        for record in batch[:100]:
            participant.report(record)
        times = np.empty(len(batch))
        for i, record in enumerate(batch):
            start = time.perf_counter()
            participant.report(record)
            times[i] = time.perf_counter() - start
        lines.append(
            f"| {path.stem} | {spec.protocol} | {spec.n_inputs} | {np.median(times) * 1e3:.3f} ms "
            f"| {np.percentile(times, 99) * 1e3:.3f} ms |"
        )
        print(lines[-1], flush=True)
    noise = per_entry(SummationHistogramEncoding(1.0, 2000))
    coin = per_entry(OptimisedUnaryEncoding(1.0, 1_000_000))
    lines += [
        "",
        "## The units of the draw-time estimate (participant/limits.py)",
        "",
        "| unit | measured here | the device estimates with |",
        "|---|---|---|",
        f"| one exact discrete Laplace sample (SHE, THE, Laplace mean) | {noise * 1e6:.1f} us | "
        f"{SECONDS_PER_NOISE * 1e6:.0f} us |",
        f"| one coin word (SUE, OUE) | {coin * 1e9:.0f} ns | {SECONDS_PER_COIN * 1e9:.0f} ns |",
        "",
        "## Specs over the default limits: reading the answer and refusing it",
        "",
        "| what the service publishes | time | peak traced memory | refused because |",
        "|---|---|---|---|",
    ]
    for name, spec in hostile_specs().items():
        seconds, peak, message = refusal(spec)
        reason = message.split("; this app accepts")[0].split(" asks ")[-1]
        lines.append(f"| {name} | {seconds * 1e3:.1f} ms | {peak / 1e6:.1f} MB | {reason} |")
        print(lines[-1], flush=True)
    units = node(JS_UNITS)
    lines += [
        "",
        "## The JavaScript device's units (Node, participant-js/src/calibration.ts)",
        "",
        "| unit | measured here | Python's | the device estimates with (after measuring itself) |",
        "|---|---|---|---|",
        f"| one exact discrete Laplace sample | {units['noise'] * 1e6:.1f} us | {noise * 1e6:.1f} us | "
        f"{units['estimate']['noise'] * 1e6:.0f} us |",
        f"| one coin word | {units['coins'] * 1e9:.0f} ns | {coin * 1e9:.0f} ns | {units['estimate']['coins'] * 1e9:.0f} ns |",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        year = Path(scratch) / "year.json"
        year_of_daily_collections(year)
        python, javascript = ledger_submits(year, Path(scratch))
        size = year.stat().st_size
    lines += [
        "",
        f"## One submit's ledger work against a year of daily collections ({size / 1e6:.1f} MB, 365 entries)",
        "",
        "| device | median of 5 | fastest | slowest |",
        "|---|---|---|---|",
        *(f"| {who} | {np.median(t) * 1e3:.1f} ms | {min(t) * 1e3:.1f} ms | {max(t) * 1e3:.1f} ms |"
          for who, t in (("Python", python), ("Node", javascript))),
    ]  # fmt: skip
    print("\n".join(lines[-4:]), flush=True)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
