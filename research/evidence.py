"""Does the model answer's ``evidence`` tell an operator what it says (the estimators' research notes)?

    python research/evidence.py [--reps 100] [--cells car:0.5,...] [--jobs 2]
    python research/evidence.py --model gaussian [--approach 3] [--out research/results/evidence-gaussian.md]

On the runs of ``bench/estimators.py`` (protocol ``auto``, fast mode, the same seeds), each
collection's :func:`aggregator.estimation.evidence.evidence` beside what its models score on the test rows:

- the runs whose most common class leads the next by at least two standard errors (a safe
  margin) and the others, and in each how often the reports' most common class is not the
  training split's (the evidence's ``majority_class``);
- the runs whose features show a dependence on the class (combined p < 0.05) and the others, and
  in each how ``normsub`` scores against ``prior only`` (the constant classifier of the reports).

``--model gaussian`` collects Australian and Diabetes (the cells default to both at ε = 0.5, 1, 2
and 4) for the Gaussian model of ``--approach`` on their original features: its class counts
come from the class input alone, ``prior only`` predicts that input's most common class, and the
p-value combines each prepared coordinate's test of equal class means.

Writes research/results/evidence.md (``--out``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "evidence.md"
CELLS = ALL_CELLS + ",diabetes:0.5,diabetes:1,diabetes:2"
GAUSSIAN_CELLS = ",".join(f"{d}:{e:g}" for d in ("australian", "diabetes") for e in (0.5, 1, 2, 4))


def cell(
    dataset: str, epsilon: float, reps: int, model: str = "discrete", approach: int = 3
) -> tuple[str, float, np.ndarray]:
    """Per run: majority, ``normsub`` and ``prior only`` accuracy, the majority lead, the
    combined dependence p-value, and 1 where the evidence's most common class is not the training
    split's (0 otherwise); shape ``(reps, 6)``. ``model`` and ``approach``: how a continuous
    data set is collected."""
    from estimators import register

    from aggregator.estimation.evidence import evidence
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, collect, run_once, runner_for, spec_for, split

    register()
    data = load_dataset(dataset)
    setup = Setup(model, approach=approach) if data.continuous else None
    gaussian = model == "gaussian"
    rows = []
    for seed in range(reps):
        names = ("normsub",) if gaussian else ("normsub", "prior only")
        r = run_once(data, "auto", epsilon, seed, names, setup=setup, mode="fast")
        # The same collection again (every draw is seeded by the run's seed), for its evidence.
        if data.continuous:
            X_train, _, y_train, _ = split(data, seed)
            spec = spec_for(data, "auto", epsilon, DEFAULT_THETA, setup, X_train, y_train)
            stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "fast")
        else:
            stats = runner_for(data).statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, "fast")
        e = evidence(stats)
        y_train = np.asarray(split(data, seed)[2], dtype=object)
        classes, counts = np.unique(y_train, return_counts=True)
        named_wrong = e["majority_class"] != classes[np.argmax(counts)]
        if gaussian:  # the class input's most common class, on the run's test rows
            y_test = np.asarray(split(data, seed)[3], dtype=object)
            prior_only = float(np.mean(y_test == e["majority_class"]))
        else:
            prior_only = r.accuracy["prior only"]
        rows.append(
            [
                r.majority_accuracy,
                r.accuracy["normsub"],
                prior_only,
                e["majority_lead"],
                e["dependence_p_value"],
                float(named_wrong),
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
    parser = cell_parser(__doc__, CELLS)
    parser.add_argument(
        "--model", choices=("discrete", "gaussian"), default="discrete", help="the model of a continuous data set"
    )
    parser.add_argument("--approach", type=int, choices=(1, 2, 3), default=3, help="the Gaussian model's approach")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the Markdown table goes")
    args = parser.parse_args()
    command = f"python research/evidence.py --reps {args.reps}"
    if args.model == "gaussian":
        args.cells = GAUSSIAN_CELLS if args.cells == CELLS else args.cells
        command += f" --model gaussian --approach {args.approach}"
    lines = [
        f"# The model's evidence against its runs (`{command}`)",
        "",
        (
            "Lead: the most common class's lead over the next in standard errors; wrong: runs whose evidence "
            "names another most common class than the training split's. p: the features' combined dependence "
            "p-value; normsub − prior only: paired, ± standard error (runs)."
        ),
        "",
        (
            "| data set | ε | lead ≥ 2 | wrong when ≥ 2 | wrong when < 2 | p < 0.05 "
            "| normsub − prior only when p < 0.05 | when p ≥ 0.05 |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in run_cells(cell, args, args.model, args.approach):
        wrong = r[:, 5] > 0.5
        safe = r[:, 3] >= 2
        dependent = r[:, 4] < 0.05
        gain = r[:, 1] - r[:, 2]
        lines.append(
            f"| {dataset} | {epsilon:g} | {safe.mean():.0%} | {share_wrong(wrong, safe)} | {share_wrong(wrong, ~safe)} "
            f"| {dependent.mean():.0%} | {mean_gain(gain, dependent)} | {mean_gain(gain, ~dependent)} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
