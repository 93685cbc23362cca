"""Does the model answer's ``evidence`` tell an operator what it says (README, *Estimators*)?

    python bench/evidence.py [--reps 100] [--cells car:0.5,...] [--jobs 2]

On the runs of ``bench/estimators.py`` (protocol ``auto``, fast mode, the same seeds), each
collection's :func:`aggregator.evidence.evidence` beside what its models score on the test rows:

- the runs whose most common class leads the next by at least two standard errors (a safe
  margin) and the others, and in each how often the reports' most common class is not the
  training split's (``prior only`` below the majority class);
- the runs whose features show a dependence on the class (combined p < 0.05) and the others, and
  in each how ``normsub`` scores against ``prior only`` (the constant classifier of the reports).

Writes bench/results/evidence.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "evidence.md"
CELLS = ALL_CELLS + ",diabetes:0.5,diabetes:1,diabetes:2"


def cell(dataset: str, epsilon: float, reps: int) -> tuple[str, float, np.ndarray]:
    """Per run: majority, ``normsub`` and ``prior only`` accuracy, the majority lead, and the
    combined dependence p-value; shape ``(reps, 5)``."""
    from estimators import register

    from aggregator.evidence import evidence
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, collect, run_once, runner_for, spec_for, split

    register()
    data = load_dataset(dataset)
    setup = Setup() if data.continuous else None
    rows = []
    for seed in range(reps):
        r = run_once(data, "auto", epsilon, seed, ("normsub", "prior only"), setup=setup, mode="fast")
        # The same collection again (every draw is seeded by the run's seed), for its evidence.
        if data.continuous:
            X_train, _, y_train, _ = split(data, seed)
            spec = spec_for(data, "auto", epsilon, DEFAULT_THETA, setup, X_train, y_train)
            stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "fast")
        else:
            stats = runner_for(data).statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, "fast")
        e = evidence(stats)
        rows.append(
            [
                r.majority_accuracy,
                r.accuracy["normsub"],
                r.accuracy["prior only"],
                e["majority_lead"],
                e["dependence_p_value"],
            ]
        )
    return dataset, epsilon, np.array(rows)


def share_wrong(wrong: np.ndarray, mask: np.ndarray) -> str:
    """How often ``wrong`` holds among the runs of ``mask``, and of how many."""
    return f"{wrong[mask].mean():.0%} of {mask.sum()}" if mask.any() else "–"


def mean_gain(gain: np.ndarray, mask: np.ndarray) -> str:
    """The mean of ``gain`` over the runs of ``mask`` ± its standard error, and how many runs."""
    if mask.sum() < 2:
        return "–" if not mask.any() else f"{gain[mask].mean():+.3f} (1 run)"
    return f"{paired(gain[mask])} ({mask.sum()})"


def main() -> None:
    args = cell_parser(__doc__, CELLS).parse_args()
    lines = [
        f"# The model's evidence against its runs (`python bench/evidence.py --reps {args.reps}`)",
        "",
        (
            "Lead: the most common class's lead over the next in standard errors; wrong: runs whose reports "
            "name another most common class than the training split's. p: the features' combined dependence "
            "p-value; normsub − prior only: paired, ± standard error (runs)."
        ),
        "",
        (
            "| data set | ε | lead ≥ 2 | wrong when ≥ 2 | wrong when < 2 | p < 0.05 "
            "| normsub − prior only when p < 0.05 | when p ≥ 0.05 |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in run_cells(cell, args):
        wrong = r[:, 2] < r[:, 0] - 1e-12
        safe = r[:, 3] >= 2
        dependent = r[:, 4] < 0.05
        gain = r[:, 1] - r[:, 2]
        lines.append(
            f"| {dataset} | {epsilon:g} | {safe.mean():.0%} | {share_wrong(wrong, safe)} | {share_wrong(wrong, ~safe)} "
            f"| {dependent.mean():.0%} | {mean_gain(gain, dependent)} | {mean_gain(gain, ~dependent)} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
