"""Accuracy and log-loss of each estimator on the same simulated collections (paired: same split,
same reports), beside the constant classifier that always predicts the training split's majority
class.

    python bench/estimators.py [--reps 100] [--eps 0.5,1,2,4] [--protocols auto] [--mode fast]

One report per person (ε per person). Writes bench/results/estimators.md: per data set, protocol
and ε, the mean accuracy of each estimator, of the majority class and of non-private Naive Bayes,
the mean log-loss (nats per test record), and the paired difference normsub − paper with its
standard error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tqdm import tqdm

from aggregator import ESTIMATORS
from sim.datasets import DATASETS, load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "estimators.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--protocols", default="auto")
    parser.add_argument("--datasets", default="car,chess,mushroom,connect-4")
    parser.add_argument("--mode", choices=["fast", "replay"], default="fast")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.eps.split(",")]
    protocols = args.protocols.split(",")
    names = list(ESTIMATORS)
    datasets = [d for d in args.datasets.split(",") if d in DATASETS]
    cells = [(d, p, e) for d in datasets for p in protocols for e in epsilons]
    data = {d: load_dataset(d) for d in datasets}
    lines = [
        f"# Estimators, paired (`python bench/estimators.py --reps {args.reps} --eps {args.eps} "
        f"--protocols {args.protocols} --mode {args.mode}`)",
        "",
        f"| data set | protocol | ε | majority | {' | '.join(names)} | non-private | log-loss {' / '.join(names)} "
        "| normsub − paper (± s.e.) | normsub − majority (± s.e.) |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|---|---|",
    ]
    for d, p, e in tqdm(cells, desc="cells"):
        runs = [run_once(data[d], p, e, seed, tuple(names), mode=args.mode) for seed in range(args.reps)]
        acc = {n: np.array([r.accuracy[n] for r in runs]) for n in names}
        loss = {n: np.array([r.log_loss[n] for r in runs]) for n in names}
        majority = np.array([r.majority_accuracy for r in runs])
        nonprivate = np.mean([r.nonprivate_accuracy for r in runs])

        def paired(a, b):
            diff = a - b
            return f"{diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.3f}"

        lines.append(
            f"| {d} | {p} | {e:g} | {majority.mean():.3f} | "
            + " | ".join(f"{acc[n].mean():.3f}" for n in names)
            + f" | {nonprivate:.3f} | "
            + " / ".join(f"{loss[n].mean():.3f}" for n in names)
            + f" | {paired(acc['normsub'], acc['paper'])} | {paired(acc['normsub'], majority)} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
