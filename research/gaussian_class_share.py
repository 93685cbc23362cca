"""Does the class share the planner offers a Gaussian spec help its model?

    python research/gaussian_class_share.py [--reps 300] [--jobs 2]

``spec --people`` forecasts how often a collection's class input will name another class the
most common, and offers the smallest class share that keeps that cost to the class prior within
0.005 (``aggregator/planning.py``). For a Gaussian spec the class input is the only one that
counts the classes. Per setting (data set, approach, projection, ε) where the planner offers a
share for the training split's size and class shares: the majority class's test accuracy, the
default model's with inputs chosen uniformly and with the offered share, and their paired
difference (± standard error) over seeds 0, 1, … (the splits of ``bench/continuous.py``; replay
mode). Writes research/results/gaussian_class_share.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from paired_runs import paired
from tqdm import tqdm

RESULTS = Path(__file__).with_name("results") / "gaussian_class_share.md"
SETTINGS = [
    (name, approach, reduce, epsilon)
    for name in ("diabetes", "australian")
    for approach, reduce in ((1, None), (3, None), (1, "dca"))
    for epsilon in (0.5, 1.0, 2.0)
]


def offered(name: str, approach: int, reduce, epsilon: float) -> float | None:
    """The class share ``spec --people`` offers for seed 0's training split (None: none)."""
    from aggregator.estimation.planning import class_share_for
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, spec_for, split

    data = load_dataset(name)
    X_train, _, y_train, _ = split(data, 0)
    setup = Setup("gaussian", None, reduce, 1 if reduce else None, approach)
    spec = spec_for(data, "DE", epsilon, DEFAULT_THETA, setup, X_train, y_train)
    labels = np.asarray(y_train, dtype=object)
    prior = np.array([np.mean(labels == c) for c in spec.classes])
    return class_share_for(spec, prior, len(labels))


def run(name: str, approach: int, reduce, epsilon: float, share: float, seed: int) -> list[float]:
    """One split: the majority class's test accuracy, and the default model's with inputs chosen
    uniformly and with the class share ``share``."""
    from aggregator.estimation.estimators import build_model
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, collect, spec_for, split

    data = load_dataset(name)
    X_train, X_test, y_train, y_test = split(data, seed)
    setup = Setup("gaussian", None, reduce, 1 if reduce else None, approach)
    spec = spec_for(data, "DE", epsilon, DEFAULT_THETA, setup, X_train, y_train)
    y_test = np.asarray(y_test, dtype=object)
    labels, counts = np.unique(np.asarray(y_train, dtype=object), return_counts=True)
    scores = [float(np.mean(y_test == labels[np.argmax(counts)]))]
    for chosen in (None, share):
        stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "replay", chosen)
        scores.append(build_model(stats).score(X_test, y_test))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=300, help="paired repetitions (seeds 0, 1, …) per setting")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    cases = [(*s, share) for s in SETTINGS if (share := offered(*s)) is not None]
    jobs = [(*c, seed) for c in cases for seed in range(args.reps)]
    runs = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(run)(*j) for j in jobs)
    results = np.array(list(tqdm(runs, total=len(jobs), desc="collections"))).reshape(len(cases), args.reps, -1)
    lines = [
        f"# The offered class share and the Gaussian model (`python research/gaussian_class_share.py --reps {args.reps}`)",
        "",
        f"DE class input, replay mode, seeds 0–{args.reps - 1}; settings where `spec --people` offers a share.",
        "",
        "| data set | approach | features | ε | share offered | majority | uniform | with the share | share − uniform |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, approach, reduce, epsilon, share), r in zip(cases, results):
        features = {None: "original", "dca": "DCA"}[reduce]
        lines.append(
            f"| {name} | A{approach} | {features} | {epsilon:g} | {share:g} | {r[:, 0].mean():.3f} "
            f"| {r[:, 1].mean():.3f} | {r[:, 2].mean():.3f} | {paired(r[:, 2] - r[:, 1])} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
