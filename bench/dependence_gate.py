"""Would a test for class dependence keep a private model at its constant classifier where the
features cannot help? Tried, not shipped (README, *Estimators*).

    python bench/dependence_gate.py [--reps 100] [--cells car:0.5,car:1,...] [--jobs 2]

For every run (the seeds and reports of ``bench/estimators.py``, protocol ``auto``, fast mode):

- the test: per feature, the squared deviations of each class's unbiased shares from the pooled
  marginal, each over its noise variance, a χ² statistic with (k − 1)·d degrees of freedom (exact
  for two classes under Gaussian noise, approximate beyond); the features' p-values combined by
  Fisher's method and by the smallest one (Bonferroni);
- normsub's bootstrap (:func:`aggregator.strength.bootstrap_accuracies`, as shipped): the
  expected accuracy of every strength in every one of its draws, from which its choice, its
  estimated gain over the class prior (strength 1024) and that gain's standard error follow, and
  the class prior's accuracy in the bootstrap's world (the estimated majority share);
- the test accuracies of ``normsub`` and of ``prior only`` (its class prior, uniform conditionals).

A gated model is ``prior only`` where the gate closes and ``normsub`` elsewhere, so every gate is
scored on the same runs. Writes bench/results/dependence_gate.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import cell_parser, paired, probed_runs, run_cells

from sim.datasets import load_dataset

RESULTS = Path(__file__).with_name("results") / "dependence_gate.md"
CELLS = "car:0.5,car:1,car:2,chess:0.5,chess:1,mushroom:0.5,mushroom:1,connect-4:1"


def dependence_p(stats) -> tuple[float, float]:
    """``(fisher, bonferroni)``: the p-values of no class dependence in any feature, the features'
    p-values (:func:`aggregator.dependence.feature_p_values`) combined by Fisher's method (as
    :func:`~aggregator.dependence.dependence_p_value`) and by the smallest one."""
    from aggregator.dependence import dependence_p_value, feature_p_values
    from aggregator.estimators import normsub_unsmoothed

    class_count = normsub_unsmoothed(stats).class_count
    p = feature_p_values(stats, class_count)
    return dependence_p_value(stats, class_count), float(min(1.0, p.min() * len(p)))


def cell(dataset: str, epsilon: float, reps: int) -> tuple[str, float, list[dict]]:
    """Every run's test, bootstrap and test accuracies for one data set and ε."""
    from estimators import prior_only  # bench/estimators.py: the constant classifier of the reports

    from aggregator.estimators import ESTIMATORS, normsub_unsmoothed
    from aggregator.strength import TIE, bootstrap_accuracies

    found: list[dict] = []

    def probe(stats):
        fisher, bonferroni = dependence_p(stats)
        per_draw = bootstrap_accuracies(stats, normsub_unsmoothed)
        accuracy = per_draw.mean(axis=0)
        chosen = int(np.flatnonzero(accuracy >= accuracy.max() - TIE)[0])
        gain = per_draw[:, chosen] - per_draw[:, -1]
        found.append(
            {
                "fisher": fisher,
                "bonferroni": bonferroni,
                "gain": gain.mean(),
                "gain_se": gain.std(ddof=1) / np.sqrt(len(gain)),
                "world_prior": accuracy[-1],
            }
        )
        return prior_only(stats)

    ESTIMATORS["probe"] = probe
    ESTIMATORS["prior only"] = prior_only
    return dataset, epsilon, probed_runs(load_dataset(dataset), epsilon, range(reps), found)


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    args = parser.parse_args()
    done = run_cells(cell, args)
    gates = {
        "Fisher p > 0.05": lambda r: r["fisher"] > 0.05,
        "Bonferroni p > 0.05": lambda r: r["bonferroni"] > 0.05,
        "Fisher p > 0.05 and gain < 1 s.e.": lambda r: r["fisher"] > 0.05 and r["gain"] < r["gain_se"],
        "Fisher p > 0.1 and gain < 2 s.e.": lambda r: r["fisher"] > 0.1 and r["gain"] < 2 * r["gain_se"],
        "Fisher p > 0.05 and gain < 0.02": lambda r: r["fisher"] > 0.05 and r["gain"] < 0.02,
        "Fisher p > 0.1 and gain < 0.05": lambda r: r["fisher"] > 0.1 and r["gain"] < 0.05,
    }
    lines = [
        f"# A dependence test as a gate (`python bench/dependence_gate.py --reps {args.reps} --cells {args.cells}`)",
        "",
        "| data set | ε | majority | prior only | normsub | normsub − majority | median Fisher p | runs p < 0.05 | "
        + " | ".join(f"{g}: gated − normsub" for g in gates)
        + " |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(gates),
    ]
    shares = ["", "Where normsub loses to prior only, by the majority share in the bootstrap's world", ""]
    shares += [
        "| data set | ε | world share | runs | normsub − prior only, mean | summed |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, runs in done:
        col = {key: np.array([r[key] for r in runs]) for key in runs[0]}
        line = (
            f"| {dataset} | {epsilon:g} | {col['majority'].mean():.3f} | {col['prior'].mean():.3f} "
            f"| {col['normsub'].mean():.3f} | {paired(col['normsub'] - col['majority'])} "
            f"| {np.median(col['fisher']):.3f} | {(col['fisher'] < 0.05).sum()} |"
        )
        for gate in gates.values():
            closed = np.array([gate(r) for r in runs])
            line += (
                f" {paired(np.where(closed, col['prior'], col['normsub']) - col['normsub'])} ({closed.sum()} closed) |"
            )
        lines.append(line)
        loss = col["normsub"] - col["prior"]
        for low, high in [(0.0, 0.55), (0.55, 0.65), (0.65, 1.01)]:
            where = (col["world_prior"] >= low) & (col["world_prior"] < high)
            if where.any():
                shares.append(
                    f"| {dataset} | {epsilon:g} | {low:.2f}–{min(high, 1):.2f} | {where.sum()} "
                    f"| {loss[where].mean():+.4f} | {loss[where].sum():+.3f} |"
                )
    lines += shares
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
