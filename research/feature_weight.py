"""One smoothing weight per feature instead of one per class: tried, not shipped (documentation,
*Estimators*).

    python research/feature_weight.py [--reps 100] [--cells car:0.5,car:1,...] [--jobs 2]

Toward uniform, each class's conditional moves by its own weight, the rarer (noisier) class
further; on a skewed feature that tells the classes nothing that difference is a false class
signal (the reviewer's item 1). With every class of a feature moved by the largest of its classes'
weights the classes stay alike there. Two estimators, on the runs of ``bench/estimators.py``
(protocol ``auto``, fast mode), each with the shipped bootstrap choosing the strength:

- ``feature weight``: every feature smoothed by its largest class weight, the bootstrap choosing
  among the usual strengths;
- ``both``: the bootstrap choosing among the usual strengths with per-class weights and the same
  strengths with one weight per feature (per-class first, so that a tie keeps it).

Writes research/results/feature_weight.md: accuracy and log-loss against ``normsub`` (paired
differences with standard errors) and how often ``both`` took the feature weight.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

from sim.datasets import load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "feature_weight.md"
CELLS = ALL_CELLS


def install() -> None:
    """A negative strength ``−s`` smooths at ``s`` with every class of a feature moved by the
    largest class weight; positive strengths are unchanged."""
    from aggregator.estimation import smoothing

    if hasattr(smoothing, "per_class_weights"):
        return
    smoothing.per_class_weights = smoothing.class_weights

    def weights(shares, marginal, totals, cell_variance, strength):
        strength = np.asarray(strength, dtype=float)
        weight = smoothing.per_class_weights(shares, marginal, totals, cell_variance, np.abs(strength))
        return np.where(strength < 0, weight.max(axis=-2, keepdims=True), weight)

    smoothing.class_weights = weights


def cell(dataset: str, epsilon: float, reps: int) -> tuple[str, float, np.ndarray]:
    """Per run: majority, normsub, feature weight, both (accuracies), their log-losses, and
    whether ``both`` chose the feature weight; shape ``(reps, 8)``."""
    install()
    from aggregator.estimation.estimators import ESTIMATORS, normsub_unsmoothed
    from aggregator.estimation.bootstrap import STRENGTHS, choose_strength

    negative = tuple(-s for s in STRENGTHS)
    took: list[bool] = []

    def smoothed(stats, strengths):
        base = normsub_unsmoothed(stats)
        strength = choose_strength(stats, normsub_unsmoothed, base, strengths)
        if len(strengths) > len(STRENGTHS):
            took.append(strength < 0)
        return base.model(stats.spec, strength)

    ESTIMATORS["feature weight"] = lambda stats: smoothed(stats, negative)
    ESTIMATORS["both"] = lambda stats: smoothed(stats, STRENGTHS + negative)
    names = ("normsub", "feature weight", "both")
    data = load_dataset(dataset)
    runs = []
    for seed in range(reps):
        result = run_once(data, "auto", epsilon, seed, names, mode="fast", log_loss=True)
        runs.append(
            [result.majority_accuracy]
            + [result.accuracy[n] for n in names]
            + [result.log_loss[n] for n in names]
            + [float(took[-1])]
        )
    return dataset, epsilon, np.array(runs)


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    args = parser.parse_args()
    done = run_cells(cell, args)
    lines = [
        f"# One smoothing weight per feature (`python research/feature_weight.py --reps {args.reps}`)",
        "",
        (
            "| data set | ε | majority | normsub | feature weight | both | feature weight − normsub "
            "| feature weight − majority | both − normsub | both took the feature weight "
            "| log-loss normsub / feature weight / both |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in done:
        lines.append(
            f"| {dataset} | {epsilon:g} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} | {r[:, 2].mean():.3f} "
            f"| {r[:, 3].mean():.3f} | {paired(r[:, 2] - r[:, 1])} | {paired(r[:, 2] - r[:, 0])} "
            f"| {paired(r[:, 3] - r[:, 1])} | {r[:, 7].mean():.0%} "
            f"| {r[:, 4].mean():.3f} / {r[:, 5].mean():.3f} / {r[:, 6].mean():.3f} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
