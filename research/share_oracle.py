"""Could any constant classifier built from the reports reach the majority class (the estimators' research notes)?

    python research/share_oracle.py [--reps 300] [--cells car:0.5,...] [--jobs 2]

The majority class of the estimators tables always predicts the training split's true majority:
no private model knows it for certain. ``prior only`` predicts the class whose pooled share the
reports put highest. Where it falls short, is that the estimator's fault or the reports'?

The *share oracle* is told the training split's true class shares, but not which class holds
which. For each of the k! assignments of the true shares to the classes it takes the likelihood
of the pooled shares (Gaussian, with :func:`aggregator.estimation.class_prior.pooled_covariance` at that
assignment; the shares sum to one, so the last is dropped), and predicts the class most likely
to hold the largest share (the likelihoods summed over the assignments that give it the
largest). Knowing the shares, it can only beat ``prior only`` by where it puts them; if it names
the majority no more often, no constant classifier from these reports can.

``projected`` predicts the largest of the class shares pooled (with the same weights) from each
input's Norm-Sub table instead of its unbiased estimate: the non-negativity of each feature's
joint cells (many of car's hold no one) as information about the class shares.

Per cell (protocol ``auto``, fast mode, the seeds and splits of ``bench/estimators.py``; the
continuous data sets binned as in ``python -m sim``): the majority class's, ``prior only``'s and
the oracle's test accuracy, how often each names another class than the training split's
majority, and the paired differences. Writes research/results/share_oracle.md.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from paired_runs import cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "share_oracle.md"
CELLS = "car:0.5,car:1,chess:0.5,mushroom:0.5,diabetes:0.5,diabetes:1,australian:0.5,australian:1"


def oracle_class(stats, pooled, truth: np.ndarray) -> int:
    """The class most likely to hold the largest of the true shares ``truth`` (shape ``(k,)``),
    given ``stats``'s :func:`~aggregator.estimation.class_prior.pooled_class_shares` ``pooled``, every
    assignment of ``truth`` to the classes equally likely a priori."""
    from aggregator.estimation.class_prior import pooled_covariance

    k = len(truth)
    logs, largest = [], []
    for order in itertools.permutations(range(k)):
        mean = truth[list(order)]
        cov = pooled_covariance(stats, pooled, mean)[:-1, :-1]
        gap = (pooled.shares - mean)[:-1]
        logs.append(-0.5 * gap @ np.linalg.solve(cov, gap) - 0.5 * np.linalg.slogdet(cov)[1])
        largest.append(int(np.argmax(mean)))
    weights = np.exp(np.array(logs) - max(logs))
    return int(np.argmax(np.bincount(largest, weights=weights, minlength=k)))


def cell(dataset: str, epsilon: float, reps: int) -> tuple[str, float, np.ndarray]:
    """Per run: the test accuracy of the majority class, of ``prior only``, of the share oracle
    and of ``projected``; shape ``(reps, 4)``."""
    from aggregator.estimation.class_prior import pooled_class_shares
    from aggregator.estimation.simplex import project_to_simplex
    from participant import encode_labels
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, collect, runner_for, spec_for, split

    data = load_dataset(dataset)
    setup = Setup() if data.continuous else None
    rows = []
    for seed in range(reps):
        # The collection run_once draws for this seed (research/evidence.py does the same).
        X_train, _, y_train, y_test = split(data, seed)
        spec = spec_for(data, "auto", epsilon, DEFAULT_THETA, setup, X_train, y_train)
        if data.continuous:
            stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "fast")
        else:
            stats = runner_for(data).statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, "fast")
        k = spec.n_classes
        truth = np.bincount(encode_labels(y_train, spec), minlength=k) / len(y_train)
        test = np.bincount(encode_labels(y_test, spec), minlength=k) / len(y_test)
        counts = stats.estimated_counts()
        pooled = pooled_class_shares(stats, counts)
        tables = [
            project_to_simplex(counts[i], stats.states[i].n).reshape(-1, k).sum(axis=0) / stats.states[i].n
            for i in pooled.inputs
        ]
        projected = np.average(np.array(tables), axis=0, weights=pooled.weights)
        rows.append(
            [
                test[np.argmax(truth)],
                test[np.argmax(pooled.shares)],
                test[oracle_class(stats, pooled, truth)],
                test[np.argmax(projected)],
            ]
        )
    return dataset, epsilon, np.array(rows)


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    parser.set_defaults(reps=300)
    args = parser.parse_args()
    lines = [
        f"# The share oracle (`python research/share_oracle.py --reps {args.reps} --cells {args.cells}`)",
        "",
        (
            f"Protocol `auto`, fast mode, seeds 0–{args.reps - 1}. Wrong: runs naming another class than the "
            "training split's majority. The oracle knows the true class shares, not which class holds which. "
            "± : standard errors of the paired differences."
        ),
        "",
        (
            "| data set | ε | majority | prior only | oracle | projected | wrong: prior only | wrong: oracle "
            "| wrong: projected | prior only − majority | oracle − prior only | projected − prior only |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in run_cells(cell, args):
        wrong = r[:, 1:] < r[:, :1] - 1e-12
        lines.append(
            f"| {dataset} | {epsilon:g} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} | {r[:, 2].mean():.3f} "
            f"| {r[:, 3].mean():.3f} | {wrong[:, 0].mean():.1%} | {wrong[:, 1].mean():.1%} | {wrong[:, 2].mean():.1%} "
            f"| {paired(r[:, 1] - r[:, 0])} | {paired(r[:, 2] - r[:, 1])} | {paired(r[:, 3] - r[:, 1])} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
