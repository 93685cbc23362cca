"""What one model costs the aggregator, per estimator (README, *Estimators*).

    python bench/model_cost.py [--repeat 7] [--eps 1]

For each data set, seed 0's collection (protocol ``auto``, fast mode): the median wall time over
``--repeat`` builds of ``normsub`` (the temperature's bootstrap included), of ``normsub`` at
temperature 1 (no bootstrap: what a caller scoring only predictions builds), and of the model's
``evidence``
(:func:`aggregator.estimation.evidence.evidence`, which the service computes beside every model). Australian
and Diabetes are collected for the Gaussian model (approach 3, original features; its model has
no bootstrap). Writes bench/results/model_cost.md.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np

from aggregator.estimation.estimators import normsub_estimator
from aggregator.estimation.evidence import evidence
from aggregator.estimation.gaussian import gaussian_estimator
from sim.datasets import load_dataset
from sim.experiment import DEFAULT_THETA, Setup, collect, runner_for, spec_for, split

RESULTS = Path(__file__).with_name("results") / "model_cost.md"


def median_ms(work, repeat: int) -> float:
    """The median wall time of ``work()`` over ``repeat`` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--eps", type=float, default=1.0)
    args = parser.parse_args()
    lines = [
        f"# Cost of one model (`python bench/model_cost.py --repeat {args.repeat} --eps {args.eps:g}`), ms, median",
        "",
        "| data set | normsub | at temperature 1 | evidence |",
        "|---|---|---|---|",
    ]
    for dataset in ("car", "chess", "mushroom", "connect-4"):
        runner = runner_for(load_dataset(dataset))
        spec = runner.spec("auto", args.eps, None, "one-report")
        stats = runner._fast_statistics(spec, 0, np.random.default_rng(0))
        lines.append(
            f"| {dataset} | {median_ms(partial(normsub_estimator, stats), args.repeat):.1f} "
            f"| {median_ms(partial(normsub_estimator, stats, temperature=1.0), args.repeat):.1f} "
            f"| {median_ms(partial(evidence, stats), args.repeat):.1f} |"
        )
    for dataset in ("australian", "diabetes"):
        data = load_dataset(dataset)
        X_train, _, y_train, _ = split(data, 0)
        spec = spec_for(data, "auto", args.eps, DEFAULT_THETA, Setup("gaussian"), X_train, y_train)
        stats = collect(spec, X_train, y_train, np.random.default_rng(0), "fast")
        lines.append(
            f"| {dataset} (Gaussian) | {median_ms(partial(gaussian_estimator, stats), args.repeat):.1f} | – "
            f"| {median_ms(partial(evidence, stats), args.repeat):.1f} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
