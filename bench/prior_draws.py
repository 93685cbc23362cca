"""Does the bootstrap choose better when each of its worlds draws the class prior from the prior's
own uncertainty? Tried, not shipped (README, *Estimators*).

    python bench/prior_draws.py [--scales 0,1,2] [--cells car:0.5,car:1,car:2,mushroom:0.5] [--jobs 2]

normsub's bootstrap (:func:`aggregator.strength.choose_strength`) draws its collections and its
test records from one world, the posterior mean with the pooled class prior. Here each of its
twelve draws first moves that prior by ``scale`` times its standard error (Gaussian, projected
onto the simplex), then draws the collection and 2,000 records from that world. Scale 0 is the
shipped choice with records drawn per world instead of once. Paired with ``normsub`` and the
majority class in bench/results/estimators-runs.csv (the same seeds and reports); writes
bench/results/prior_draws.md.
"""

from __future__ import annotations

import argparse
import csv
from functools import partial
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

from sim.datasets import load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "prior_draws.md"
RUNS = RESULTS.with_name("estimators-runs.csv")


def choose(stats, derive, base, scale: float) -> float:
    """The strength the bootstrap picks when each draw's world has its own class prior."""
    from aggregator import strength as S
    from aggregator.class_prior import class_share_variance
    from aggregator.model import NaiveBayesModel, one_hot
    from aggregator.simplex import project_to_simplex

    k = stats.spec.n_classes
    weight = sum(1 / class_share_variance(o, s.n, k) for o, s in zip(stats.spec.oracles, stats.states) if s.n)
    se = 1 / np.sqrt(weight)
    rng = np.random.default_rng(S.statistics_seed(stats))
    truth = S.plug_in_truth(stats, base)
    strengths = np.array(S.STRENGTHS)
    accuracy = np.zeros(len(strengths))
    for _ in range(S.DRAWS):
        prior = np.maximum(project_to_simplex(truth.class_prior + scale * se * rng.standard_normal(k), 1.0), 1e-3)
        count = prior / prior.sum() * truth.class_count.sum()
        world = NaiveBayesModel(stats.spec, count, [np.exp(t) * count[:, None] for t in truth.feature_log_prob])
        codes, posterior = S.sample_records(world, S.RECORDS, rng)
        onehot = one_hot(codes, [t.shape[1] for t in world.feature_log_prob])
        accuracy += S.expected_accuracy(derive(S.draw_statistics(world, stats, rng)), onehot, posterior, strengths)
    accuracy /= S.DRAWS
    return float(strengths[int(np.flatnonzero(accuracy >= accuracy.max() - S.TIE)[0])])


def cell(dataset: str, epsilon: float, scale: float, reps: int) -> tuple[str, float, float, list[float]]:
    """The test accuracy of each of ``reps`` runs with the prior drawn at ``scale``."""
    from aggregator.estimators import ESTIMATORS, normsub_unsmoothed

    def estimator(stats):
        derive = partial(normsub_unsmoothed, target="uniform")
        base = derive(stats)
        return base.model(stats.spec, choose(stats, derive, base, scale))

    ESTIMATORS["prior draws"] = estimator
    data = load_dataset(dataset)
    runs = [run_once(data, "auto", epsilon, s, ("prior draws",), mode="fast") for s in range(reps)]
    return dataset, epsilon, scale, [r.accuracy["prior draws"] for r in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="0,1,2")
    parser.add_argument("--cells", default="car:0.5,car:1,car:2,mushroom:0.5")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with open(RUNS, newline="") as f:
        old = {(r["dataset"], float(r["eps"]), int(r["seed"])): r for r in csv.DictReader(f) if r["protocol"] == "auto"}
    cells = [(c.split(":")[0], float(c.split(":")[1])) for c in args.cells.split(",")]
    scales = [float(s) for s in args.scales.split(",")]
    done = Parallel(n_jobs=args.jobs)(delayed(cell)(d, e, s, args.reps) for s in scales for d, e in cells)
    command = f"python bench/prior_draws.py --scales {args.scales} --cells {args.cells} --reps {args.reps}"
    lines = [
        f"# Class priors drawn per bootstrap world (`{command}`)",
        "",
        "| scale | data set | ε | accuracy | − normsub (± s.e.) | − majority (± s.e.) |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, scale, accuracy in done:
        accuracy = np.array(accuracy)
        rows = [old[(dataset, epsilon, s)] for s in range(len(accuracy))]
        cols = []
        for name in ("normsub", "majority"):
            diff = accuracy - np.array([float(r[name]) for r in rows])
            cols.append(f"{diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.3f}")
        lines.append(f"| {scale:g} | {dataset} | {epsilon:g} | {accuracy.mean():.3f} | {cols[0]} | {cols[1]} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
