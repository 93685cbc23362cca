"""The bootstrap's null world and the test that weighs it (the estimators' research notes).

    python research/null_world.py [--reps 100] [--cells car:0.5,...] [--jobs 2] [--collections 600]

Two measurements:

- **Calibration.** Four features independent of the class (skewed marginals of 2 to 5 values),
  2,000 reports per input at ε = 1, ``--collections`` collections per case: how often the shipped
  p-value (:func:`aggregator.estimation.dependence.dependence_p_value`, cells independent at an empty cell's
  variance) and an exact one (:func:`exact_p_value`: the deviations' full covariance, DE's
  multinomial covariance included) fall below 0.05 and 0.2, where a calibrated test gives 5 % and
  20 %.
- **Accuracy.** On the runs of ``bench/estimators.py`` (protocol ``auto``, fast mode, the same
  seeds): ``normsub`` as shipped, without the null world (its weight 0: the bootstrap before it),
  and weighted by the exact p-value; the paired differences with standard errors.

Writes research/results/null_world.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

from sim.datasets import load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "null_world.md"
CASES = [("OUE", (0.7, 0.3)), ("DE", (0.5, 0.5)), ("OUE", (0.70, 0.22, 0.04, 0.04)), ("DE", (0.70, 0.22, 0.04, 0.04))]


def exact_p_value(stats, class_count: np.ndarray) -> float:
    """:func:`~aggregator.estimation.dependence.dependence_p_value` with each feature's exact
    :func:`~aggregator.estimation.dependence.deviation_statistic`."""
    from aggregator.estimation.dependence import combined_p_value, exact_feature_p_values

    return combined_p_value(exact_feature_p_values(stats, class_count))


def calibration(collections: int) -> list[str]:
    """Table rows: per case, the share of p-values below 0.05 and 0.2, shipped and exact."""
    from aggregator import CollectionStatistics
    from aggregator.estimation.bootstrap import draw_statistics
    from aggregator.estimation.dependence import dependence_p_value
    from aggregator.estimation.estimators import normsub_unsmoothed
    from aggregator.estimation.model import NaiveBayesModel
    from participant import CollectionSpec, Feature

    rows = []
    for protocol, prior in CASES:
        rng = np.random.default_rng(11)
        k = len(prior)
        conditionals = [np.tile(rng.dirichlet(np.full(d, 2.0)), (k, 1)) for d in (2, 3, 4, 5)]
        features = [Feature(f"f{i}", [f"v{j}" for j in range(t.shape[1])]) for i, t in enumerate(conditionals)]
        spec = CollectionSpec(features, [f"c{j}" for j in range(k)], protocol, 1.0)
        truth = NaiveBayesModel(spec, np.array(prior) * 1e6, [t * 1e6 for t in conditionals])
        like = CollectionStatistics(spec)
        for state in like.states:
            state.n = 2000
        draw = np.random.default_rng(3)
        shipped, exact = [], []
        for _ in range(collections):
            drawn = draw_statistics(truth, like, draw)
            class_count = normsub_unsmoothed(drawn).class_count
            shipped.append(dependence_p_value(drawn, class_count))
            exact.append(exact_p_value(drawn, class_count))
        shipped, exact = np.array(shipped), np.array(exact)
        rows.append(
            f"| {protocol} | {' / '.join(f'{c:g}' for c in prior)} | {(shipped < 0.05).mean():.1%} "
            f"| {(shipped < 0.2).mean():.1%} | {(exact < 0.05).mean():.1%} | {(exact < 0.2).mean():.1%} |"
        )
    return rows


def cell(dataset: str, epsilon: float, reps: int, first_seed: int = 0) -> tuple[str, float, np.ndarray]:
    """Per run (seeds ``first_seed`` on): majority, normsub, without the null world, with the
    exact p-value (accuracies)."""
    from aggregator.estimation import calibration as strength  # where the null world is weighed now
    from aggregator.estimation.estimators import ESTIMATORS, normsub_estimator

    def variant(**patch):
        def estimate(stats):
            saved = {name: getattr(strength, name) for name in patch}
            for name, value in patch.items():
                setattr(strength, name, value)
            try:
                return normsub_estimator(stats, temperature=1.0)  # scored on accuracy alone
            finally:
                for name, value in saved.items():
                    setattr(strength, name, value)

        return estimate

    ESTIMATORS["no null world"] = variant(null_probability=lambda p: 0.0)
    ESTIMATORS["exact p-value"] = variant(dependence_p_value=exact_p_value)
    names = ("normsub", "no null world", "exact p-value")
    data = load_dataset(dataset)
    runs = []
    for seed in range(first_seed, first_seed + reps):
        result = run_once(data, "auto", epsilon, seed, names, mode="fast")
        runs.append([result.majority_accuracy] + [result.accuracy[n] for n in names])
    return dataset, epsilon, np.array(runs)


def main() -> None:
    parser = cell_parser(__doc__, ALL_CELLS)
    parser.add_argument("--collections", type=int, default=600, help="collections per calibration case")
    parser.add_argument("--first-seed", type=int, default=0, help="100: seeds 100–199, runs no rule was chosen on")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    lines = [
        (
            f"# The null world (`python research/null_world.py --reps {args.reps} --collections {args.collections} "
            f"--first-seed {args.first_seed}`)"
        ),
        "",
        "Share of p-values below 0.05 and 0.2 without class dependence (calibrated: 5 % and 20 %)",
        "",
        "| protocol | class prior | shipped < 0.05 | shipped < 0.2 | exact < 0.05 | exact < 0.2 |",
        "|---|---|---|---|---|---|",
        *calibration(args.collections),
        "",
        "Accuracy, paired over the same runs (± standard error)",
        "",
        (
            "| data set | ε | majority | normsub | normsub − majority | normsub − no null world "
            "| exact p-value − normsub | exact p-value − majority |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in run_cells(cell, args, args.first_seed):
        lines.append(
            f"| {dataset} | {epsilon:g} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} | {paired(r[:, 1] - r[:, 0])} "
            f"| {paired(r[:, 1] - r[:, 2])} | {paired(r[:, 3] - r[:, 1])} | {paired(r[:, 3] - r[:, 0])} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
