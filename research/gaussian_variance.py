"""The Gaussian model's class variances: bias against known truth, and accuracy on continuous data.

    python research/gaussian_variance.py [--reps 200] [--runs 50] [--jobs 2]

1. Known truth: one coordinate in [-1, 1], two classes (80 % and 20 %), the minority's variance
   1/7, 1 or 7 times the majority's (0.04), n = 10^3, 10^4 and 10^5 people, ε 1 and 4 (approach
   3, exact fast mode, ``--reps`` collections each). For the minority class: the true variance
   (of the drawn values), the default's bias and its standard deviation over the collections, and
   the same for the rule it replaced (the pooled variance substituted wherever a variance was below
   twice its standard error, then raised to its standard error).
2. Accuracy of the Gaussian model (approach 3 and 1, protocol DE for the class) on the continuous
   data sets, paired on the same reports (``--runs`` splits, ε 0.5 to 4): the default against that
   rule, beside the majority class. The corpus's continuous sets (glass, wheat-seeds, sonar,
   winequality-white) declare their data's range; Australian and Diabetes their published ones.

Writes ``research/results/gaussian_variance.md``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

import aggregator.estimation.estimators as estimators

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from aggregator.estimation.gaussian import (
    VARIANCE_FLOOR,
    GaussianModel,
    class_moments,
    class_prior,
    corrected_variances,
)
from participant import CollectionSpec
from participant.continuous import ContinuousFeature, Preparation
from participant.encoding import population_inputs
from sim.datasets import Dataset, load_dataset
from sim.experiment import Setup, run_once, simulate_collection

RESULTS = Path(__file__).with_name("results") / "gaussian_variance.md"
CORPUS_CONTINUOUS = ("glass", "wheat-seeds", "sonar", "winequality-white")


def substituted(stats, estimator: str = "normsub") -> GaussianModel:
    """The rule the default replaced: the pooled variance wherever a class's was below twice its
    standard error, then every variance raised to at least its standard error."""
    spec = stats.spec
    prior = class_prior(stats, "normsub")
    theta, mean_square = class_moments(stats, prior)
    theta, mean_square = np.clip(theta, -1.0, 1.0), np.clip(mean_square, 0.0, 1.0)
    var, se = corrected_variances(stats, prior, theta, mean_square)
    pooled = (prior[:, None] * var).sum(axis=0, keepdims=True)
    pooled_se = np.sqrt((prior[:, None] ** 2 * se**2).sum(axis=0, keepdims=True))
    var = np.where(var < 2 * se, np.broadcast_to(pooled, var.shape), var)
    se = np.where(var == pooled, np.broadcast_to(pooled_se, se.shape), se)
    return GaussianModel(spec, prior, theta, np.clip(np.maximum(var, se), VARIANCE_FLOOR, 1.0))


def truth_cell(ratio: float, n: int, epsilon: float, reps: int) -> dict:
    """Bias and spread of the minority class's variance, default and substituted, over ``reps`` collections."""
    spec = CollectionSpec(
        [], ["a", "b"], "DE", epsilon, continuous=Preparation([ContinuousFeature("x", -1, 1)]), model="gaussian"
    )
    rng = np.random.default_rng(int(ratio * 1000) + n + int(epsilon * 10))
    truths, default, replaced = [], [], []
    for _ in range(reps):
        y = np.where(rng.random(n) < 0.2, "b", "a")
        x = np.clip(np.where(y == "b", rng.normal(-0.2, np.sqrt(0.04 * ratio), n), rng.normal(0.1, 0.2, n)), -1, 1)
        truths.append(np.var(x[y == "b"]))
        stats = simulate_collection(spec, population_inputs(spec, x[:, None], y), rng, mode="fast")
        default.append(estimators.gaussian_estimator(stats).var[1, 0])
        replaced.append(substituted(stats).var[1, 0])
    truth = float(np.mean(truths))
    row = {"ratio": ratio, "n": n, "eps": epsilon, "truth": truth}
    for name, values in (("default", np.array(default)), ("substituted", np.array(replaced))):
        row[f"{name} bias"] = values.mean() - truth
        row[f"{name} sd"] = values.std(ddof=1)
    return row


def continuous_problem(name: str) -> Dataset:
    """A continuous data set: Australian and Diabetes as published, a corpus file with its data's range."""
    if name in ("australian", "diabetes"):
        return load_dataset(name)
    from problems import corpus_file

    frame = pd.read_csv(corpus_file(name), on_bad_lines="skip").dropna()
    X = frame.iloc[:, :-1].to_numpy(dtype=float)
    ranges = tuple((float(lo), float(hi) if hi > lo else float(lo) + 1.0) for lo, hi in zip(X.min(0), X.max(0)))
    y = frame.iloc[:, -1].astype(str).to_numpy(dtype=object)
    return Dataset(name, X, y, tuple(frame.columns[:-1]), frame.columns[-1], ranges)


def accuracy_cell(name: str, epsilon: float, approach: int, runs: int) -> dict:
    """Mean accuracy of the default and the substituted rule on the same reports, and their paired difference."""
    warnings.simplefilter("ignore")
    data = continuous_problem(name)
    setup = Setup("gaussian", approach=approach)
    default, replaced, majority = [], [], []
    original = estimators.gaussian_estimator
    for seed in range(runs):
        result = run_once(data, "DE", epsilon, seed, ("normsub",), setup=setup, mode="fast")
        estimators.gaussian_estimator = lambda stats, estimator="normsub": substituted(stats)
        try:
            old = run_once(data, "DE", epsilon, seed, ("normsub",), setup=setup, mode="fast")
        finally:
            estimators.gaussian_estimator = original
        default.append(result.accuracy["normsub"])
        replaced.append(old.accuracy["normsub"])
        majority.append(result.majority_accuracy)
    diff = np.array(default) - np.array(replaced)
    return {
        "data set": name, "approach": approach, "eps": epsilon, "majority": np.mean(majority),
        "default": np.mean(default), "substituted": np.mean(replaced),
        "difference": diff.mean(), "se": diff.std(ddof=1) / np.sqrt(len(diff)),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=200, help="collections per known-truth cell")
    parser.add_argument("--runs", type=int, default=50, help="paired splits per accuracy cell")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    truth = Parallel(n_jobs=args.jobs)(
        delayed(truth_cell)(r, n, e, args.reps) for e in (1.0, 4.0) for r in (1 / 7, 1.0, 7.0) for n in (1000, 10_000, 100_000)
    )
    problems = ("australian", "diabetes", *CORPUS_CONTINUOUS)
    accuracy = Parallel(n_jobs=args.jobs)(
        delayed(accuracy_cell)(p, e, a, args.runs) for p in problems for a in (3, 1) for e in (0.5, 1, 2, 4)
    )
    lines = [
        f"# Gaussian class variances (`python research/gaussian_variance.py --reps {args.reps} --runs {args.runs}`)",
        "",
        "## The minority class's variance against known truth",
        "",
        "| ε | ratio | n | true variance | default bias (± sd) | bias / sd | substituted bias (± sd) | bias / sd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in truth:
        lines.append(
            f"| {r['eps']:g} | {r['ratio']:.3g} | {r['n']:,} | {r['truth']:.4f} "
            f"| {r['default bias']:+.4f} ± {r['default sd']:.4f} | {r['default bias'] / r['default sd']:+.2f} "
            f"| {r['substituted bias']:+.4f} ± {r['substituted sd']:.4f} "
            f"| {r['substituted bias'] / r['substituted sd']:+.2f} |"
        )
    lines += [
        "",
        "## Accuracy on the continuous data sets, paired",
        "",
        "| data set | approach | ε | majority | default | substituted | default − substituted (± s.e.) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in accuracy:
        lines.append(
            f"| {r['data set']} | {r['approach']} | {r['eps']:g} | {r['majority']:.3f} | {r['default']:.3f} "
            f"| {r['substituted']:.3f} | {r['difference']:+.3f} ± {r['se']:.3f} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
