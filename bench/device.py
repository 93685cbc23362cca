"""How long one report takes on the device: ``Participant(spec).report(record)`` with the secure
samplers (the OS CSPRNG, exact coins), for every built-in collection spec.

    python bench/device.py [--reports 2000]

For each spec in ``sim/specs`` (its protocol as shipped, ``auto`` for the discrete ones), builds
one participant and times ``--reports`` reports of records drawn from the data set, after a warm-up;
prints the median and the 99th percentile per report and writes ``bench/results/device.md``.
The client paces the send separately (``participant.client.DEFAULT_PACE``); this is the CPU work.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from participant import CollectionSpec, Participant
from sim.datasets import load_dataset

SPECS = Path(__file__).resolve().parents[1] / "sim" / "specs"
RESULTS = Path(__file__).with_name("results") / "device.md"


def records(name: str, spec: CollectionSpec, count: int) -> list[dict]:
    data = load_dataset(name)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(data.y), count)
    names = [f.name for f in (spec.continuous.inputs if spec.continuous else spec.features)]
    return [{**dict(zip(names, data.X[r])), spec.label: data.y[r]} for r in rows]


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
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
