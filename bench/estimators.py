"""Accuracy of each estimator on the same simulated collections (paired: same split, same reports).

    python bench/estimators.py [--reps 20] [--eps 0.5,1,2,4] [--protocols DE,SUE,OUE,SHE,THE]

One report per person (ε per person). Prints a Markdown table of mean accuracy per data set,
protocol and ε, and the mean paired difference with its standard error.
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from aggregator import ESTIMATORS
from sim.datasets import DATASETS, load_dataset
from sim.experiment import run_once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--protocols", default="DE,SUE,OUE,SHE,THE")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    args = parser.parse_args()
    epsilons = [float(e) for e in args.eps.split(",")]
    protocols = args.protocols.split(",")
    names = list(ESTIMATORS)
    cells = [(d, p, e) for d in args.datasets.split(",") for p in protocols for e in epsilons]
    data = {d: load_dataset(d) for d in args.datasets.split(",")}
    rows = []
    for d, p, e in tqdm(cells, desc="cells"):
        runs = [run_once(data[d], p, e, seed, tuple(names)) for seed in range(args.reps)]
        acc = {n: np.array([r.accuracy[n] for r in runs]) for n in names}
        diff = acc["normsub"] - acc["paper"]
        rows.append((d, p, e, *(acc[n].mean() for n in names), diff.mean(), diff.std(ddof=1) / np.sqrt(len(diff))))
    print(f"| data set | protocol | ε | {' | '.join(names)} | normsub − paper (± s.e.) |")
    print("|---|---|---|" + "---|" * len(names) + "---|")
    for d, p, e, *values in rows:
        means, mean_diff, se = values[:-2], values[-2], values[-1]
        print(f"| {d} | {p} | {e:g} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {mean_diff:+.3f} ± {se:.3f} |")
    diffs = np.array([r[-2] for r in rows])
    print(f"\nnormsub beats paper in {(diffs > 0).sum()} of {len(diffs)} cells; mean gain {diffs.mean():+.3f}")


if __name__ == "__main__":
    main()
