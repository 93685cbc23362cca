"""How normsub smooths conditionals: the empirical-Bayes rule (bounded by one standard deviation
per cell) against the earlier pseudo-count of one standard deviation per cell, and against the
paper's estimator.

    python research/smoothing.py [--reps 20]

Part 1, convergence: a known Naive Bayes model (2 classes, features of 4, 4 and 6 values), OUE at
ε = 1, fast mode, 10 seeds per size: the mean largest conditional-probability error.
Part 2, accuracy: the four discrete data sets and the two continuous ones (binned as the paper
does), protocols auto, OUE, DE and SHE, ε 0.5 to 4, fast mode, paired seeds: mean accuracy paper / earlier rule / normsub, and the paired difference
normsub − earlier with its standard error.
"""

from __future__ import annotations

import argparse

import numpy as np

import aggregator.estimation.estimators as estimators
from aggregator import CollectionStatistics, build_model
from aggregator.estimation.model import NaiveBayesModel
from aggregator.estimation.simplex import project_to_simplex
from participant import CollectionSpec, Feature
from sim.datasets import load_dataset
from sim.experiment import run_once
from sim.synthetic import known_model_statistics, largest_conditional_error


def earlier_rule(stats: CollectionStatistics) -> NaiveBayesModel:
    """normsub as it was: conditionals plus one standard deviation per cell."""
    model = estimators.normsub_estimator(stats, 1.0, temperature=1.0)
    k = stats.spec.n_classes
    tables = [
        project_to_simplex(raw, state.n).reshape(-1, k).T + np.sqrt(oracle.variance(max(state.n, 1))[0])
        for oracle, state, raw in zip(stats.spec.oracles[1:], stats.states[1:], stats.estimated_counts()[1:])
    ]
    return NaiveBayesModel(stats.spec, model.class_count, tables)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    estimators.ESTIMATORS["earlier"] = earlier_rule
    prior = np.array([0.3, 0.7])
    conditionals = [np.random.default_rng(0).dirichlet(np.ones(d), size=2) for d in (4, 4, 6)]
    spec = CollectionSpec(
        [Feature(f"f{i}", [str(j) for j in range(t.shape[1])]) for i, t in enumerate(conditionals)], ["a", "b"], "OUE", 1.0
    )
    print("| people | paper | earlier rule | normsub |\n|---|---|---|---|")
    for n in (1_000, 10_000, 100_000, 1_000_000):
        errors = {name: [] for name in ("paper", "earlier", "normsub")}
        for seed in range(10):
            stats = known_model_statistics(spec, prior, conditionals, n, np.random.default_rng(seed + 1))
            for name in errors:
                model = build_model(stats, name)
                errors[name].append(largest_conditional_error(model, conditionals))
        print(f"| {n:,} | " + " | ".join(f"{np.mean(errors[e]):.4f}" for e in errors) + " |", flush=True)
    epsilons = (0.5, 1, 2, 4)
    print("\n| data set | protocol | " + " | ".join(f"ε={e:g}" for e in epsilons) + " |")
    print("|---|---|" + "---|" * len(epsilons))
    tally = {"earlier": [0, 0, 0], "paper": [0, 0, 0]}  # win, tie, lose of normsub against each
    for name in ("car", "chess", "mushroom", "connect-4", "australian", "diabetes"):
        data = load_dataset(name)
        for protocol in ("auto", "OUE", "DE", "SHE"):
            cells = []
            for eps in epsilons:
                runs = [run_once(data, protocol, eps, s, ("paper", "earlier", "normsub"), mode="fast") for s in range(args.reps)]
                mean = {e: np.mean([r.accuracy[e] for r in runs]) for e in ("paper", "earlier", "normsub")}
                diff = np.array([r.accuracy["normsub"] - r.accuracy["earlier"] for r in runs])
                for other in tally:
                    d = np.array([r.accuracy["normsub"] - r.accuracy[other] for r in runs])
                    se = d.std(ddof=1) / np.sqrt(args.reps)
                    tally[other][0 if d.mean() > 2 * se else 2 if d.mean() < -2 * se else 1] += 1
                cells.append(
                    f"{mean['paper']:.3f} / {mean['earlier']:.3f} / {mean['normsub']:.3f} "
                    f"({diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(args.reps):.3f})"
                )
            print(f"| {name} | {protocol} | " + " | ".join(cells) + " |", flush=True)
    print("\nnormsub against (win / tie / lose, a difference beyond two standard errors):")
    for other, (win, tie, lose) in tally.items():
        print(f"  {other}: {win} / {tie} / {lose}")


if __name__ == "__main__":
    main()
