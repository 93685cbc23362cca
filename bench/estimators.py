"""Accuracy and log-loss of each estimator on the same simulated collections (paired: same split,
same reports), beside the best constant classifier on the test rows.

    python bench/estimators.py [--reps 100] [--eps 0.5,1,2,4] [--protocols auto] [--mode fast] [--jobs 2]

One report per person (ε per person). Writes bench/results/estimators.md: per data set, protocol
and ε, the mean accuracy of each estimator, of the best constant and of non-private Naive Bayes,
the mean log-loss (nats per test record), and the paired differences of normsub with paper and
with the best constant, and of ``uniform`` (normsub smoothed toward uniform instead of each
feature's pooled marginal, the default's target) with normsub and the best constant, each with its
standard error. ``prior only`` is
the constant classifier the private reports give: normsub's class prior with every conditional
uniform, so it predicts the class the reports say is the most common. Every run's accuracies go to
bench/results/estimators-runs.csv, so that two versions' runs (the same seeds, the same reports)
can be paired: ``--against OLD.csv`` adds a table of normsub's paired differences with the
normsub of OLD.csv (the ``estimators-runs-*.csv`` beside it hold earlier versions' runs, named by
commit).
"""

from __future__ import annotations

import argparse
import csv
from functools import partial
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from tqdm import tqdm

from sim.datasets import DATASETS, load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "estimators.md"
RUNS = RESULTS.with_name("estimators-runs.csv")
NAMES = ("paper", "normsub", "uniform", "prior only")


def register() -> None:
    """Adds ``uniform`` and ``prior only`` to the estimators (in this process and in every worker)."""
    # Imported here: a worker unpickles this module's globals by value, not the shared registry.
    import aggregator.estimation.estimators as estimators

    estimators.ESTIMATORS["uniform"] = partial(estimators.normsub_estimator, target="uniform")
    estimators.ESTIMATORS["prior only"] = prior_only


def prior_only(stats):
    """normsub's class prior with uniform conditionals: the constant classifier of the private reports."""
    from aggregator.estimation.estimators import normsub_unsmoothed
    from aggregator.estimation.model import NaiveBayesModel

    base = normsub_unsmoothed(stats)
    return NaiveBayesModel(stats.spec, base.class_count, [np.ones_like(t) for t in base.tables])


def cell(dataset: str, protocol: str, epsilon: float, reps: int, mode: str) -> tuple[str, list[dict]]:
    """One table row, ``reps`` paired repetitions of every estimator in :data:`NAMES`, and each
    run's accuracies."""
    register()
    data = load_dataset(dataset)
    runs = [run_once(data, protocol, epsilon, seed, NAMES, mode=mode, log_loss=True) for seed in range(reps)]
    acc = {n: np.array([r.accuracy[n] for r in runs]) for n in NAMES}
    loss = {n: np.array([r.log_loss[n] for r in runs]) for n in NAMES}
    majority = np.array([r.majority_accuracy for r in runs])
    nonprivate = np.mean([r.nonprivate_accuracy for r in runs])

    per_run = [
        {"dataset": dataset, "protocol": protocol, "eps": epsilon, "seed": r.seed, "majority": r.majority_accuracy}
        | {n: r.accuracy[n] for n in NAMES}
        for r in runs
    ]

    def paired(a, b):
        diff = a - b
        return f"{diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.3f}"

    return (
        f"| {dataset} | {protocol} | {epsilon:g} | {majority.mean():.3f} | "
        + " | ".join(f"{acc[n].mean():.3f}" for n in NAMES)
        + f" | {nonprivate:.3f} | "
        + " / ".join(f"{loss[n].mean():.3f}" for n in NAMES)
        + f" | {paired(acc['normsub'], acc['paper'])} | {paired(acc['normsub'], majority)}"
        + f" | {paired(acc['uniform'], acc['normsub'])}"
        + f" | {paired(acc['uniform'], majority)} |"
    ), per_run


def against(path: Path, runs: list[dict]) -> list[str]:
    """Table lines: per row, normsub's mean here and in the runs of ``path`` on the same seeds, and
    the paired difference with its standard error."""
    with open(path, newline="") as f:
        old = {
            (r["dataset"], r["protocol"], float(r["eps"]), int(r["seed"])): float(r["normsub"])
            for r in csv.DictReader(f)
        }
    rows: dict[tuple, list[tuple[float, float]]] = {}
    for r in runs:
        key = (r["dataset"], r["protocol"], float(r["eps"]))
        if key + (r["seed"],) in old:
            rows.setdefault(key, []).append((r["normsub"], old[key + (r["seed"],)]))
    lines = [
        f"normsub against {path.name} (paired on the same seeds)",
        "",
        "| data set | protocol | ε | runs | normsub | before | difference (± s.e.) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (dataset, protocol, epsilon), pairs in rows.items():
        new, before = np.array(pairs).T
        diff = new - before
        se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
        lines.append(
            f"| {dataset} | {protocol} | {epsilon:g} | {len(diff)} | {new.mean():.3f} | {before.mean():.3f} "
            f"| {diff.mean():+.3f} ± {se:.3f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--protocols", default="auto")
    parser.add_argument("--datasets", default="car,chess,mushroom,connect-4")
    parser.add_argument("--mode", choices=["fast", "replay"], default="fast")
    parser.add_argument("--jobs", type=int, default=2, help="rows computed in parallel (processes)")
    parser.add_argument("--against", type=Path, help="another version's estimators-runs.csv to pair normsub with")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.eps.split(",")]
    protocols = args.protocols.split(",")
    datasets = [d for d in args.datasets.split(",") if d in DATASETS]
    cells = [(d, p, e) for d in datasets for p in protocols for e in epsilons]
    lines = [
        f"# Estimators, paired (`python bench/estimators.py --reps {args.reps} --eps {args.eps} "
        f"--protocols {args.protocols} --mode {args.mode}`)",
        "",
        f"| data set | protocol | ε | best constant | {' | '.join(NAMES)} | non-private | log-loss {' / '.join(NAMES)} "
        "| normsub − paper (± s.e.) | normsub − best constant (± s.e.) "
        "| uniform − normsub (± s.e.) | uniform − best constant (± s.e.) |",
        "|---|---|---|---|" + "---|" * len(NAMES) + "---|---|---|---|---|---|",
    ]
    rows = Parallel(n_jobs=args.jobs, return_as="generator")(
        delayed(cell)(d, p, e, args.reps, args.mode) for d, p, e in cells
    )
    done = list(tqdm(rows, total=len(cells), desc="rows"))
    lines += [line for line, _ in done]
    if args.against:
        lines += ["", *against(args.against, [run for _, runs in done for run in runs])]
    RESULTS.write_text("\n".join(lines) + "\n")
    with open(RUNS, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(done[0][1][0]))
        writer.writeheader()
        for _, runs in done:
            writer.writerows(runs)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
