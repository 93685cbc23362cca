"""The class share ``python -m sim plan`` picks, per row of the estimators table, and what it buys.

    python research/planned_share.py [--reps 300] [--plan-reps 100] [--plan-seed 1000] [--sample-rows N]
                                  [--cells car:0.5,...] [--jobs 2]

For every cell (protocol ``auto``, fast mode), :func:`sim.plan.plan_class_share` plans from the
whole data set as the operator's sample (or, with ``--sample-rows N``, a pilot of N rows drawn
without replacement, seeded by ``--plan-seed``, each simulated collection that split's training rows
grown to the training split's number of people and scored on its test rows), on seeds
``--plan-seed`` onward (not the seeds it is measured on). Then ``normsub`` at
the planned share is measured against the uniform choice and against the majority class on seeds
0 to ``--reps`` − 1, the splits of ``bench/estimators.py``.
Where the plan keeps the uniform choice the collection is the table's, run for run. Diabetes is
binned into the paper's four bins per coordinate. Writes research/results/planned_share.md (or
``--out``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "planned_share.md"
CELLS = ALL_CELLS + ",diabetes:0.5,diabetes:1"


def cell(dataset: str, epsilon: float, reps: int, plan_reps: int, plan_seed: int, sample_rows: int | None) -> tuple:
    """The plan's chosen share (None: uniform), its forecast gain and standard error, and per
    measured seed ``(reps, 3)``: the majority class's, uniform ``normsub``'s and planned
    ``normsub``'s accuracy."""
    from sim.datasets import load_dataset
    from sim.experiment import Setup, run_once, split
    from sim.plan import plan_class_share

    data = load_dataset(dataset)
    setup = Setup() if data.continuous else None
    sample, people = data, None
    if sample_rows:
        rows = np.random.default_rng(plan_seed).choice(len(data.y), sample_rows, replace=False)
        sample, people = data.rows(rows), len(split(data, 0)[2])
    plan = plan_class_share(sample, "auto", epsilon, reps=plan_reps, seed=plan_seed, setup=setup, people=people)
    gain = (0.0, 0.0)
    if plan.chosen is not None:
        gain = next(f for f in plan.forecasts if f.share == plan.chosen).gain(plan.forecasts[0])
    rows = []
    for seed in range(reps):
        uniform = run_once(data, "auto", epsilon, seed, ("normsub",), setup=setup, mode="fast")
        planned = uniform
        if plan.chosen is not None:
            planned = run_once(
                data, "auto", epsilon, seed, ("normsub",), setup=setup, mode="fast", class_share=plan.chosen
            )
        rows.append([uniform.majority_accuracy, uniform.accuracy["normsub"], planned.accuracy["normsub"]])
    return dataset, epsilon, plan.chosen, gain, np.array(rows)


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    parser.set_defaults(reps=300)
    parser.add_argument("--plan-reps", type=int, default=100, help="simulated collections per share in each plan")
    parser.add_argument("--plan-seed", type=int, default=1000, help="first seed of the plans' collections")
    parser.add_argument("--sample-rows", type=int, help="plan from a pilot of this many rows, not the whole data set")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the table's file (default {RESULTS})")
    args = parser.parse_args()
    lines = [
        "# The class share the plan picks",
        "",
        (
            f"`python research/planned_share.py --reps {args.reps} --plan-reps {args.plan_reps} "
            f"--plan-seed {args.plan_seed}{f' --sample-rows {args.sample_rows}' if args.sample_rows else ''} "
            f"--cells {args.cells}`: protocol `auto`, fast mode. Each plan: `python -m sim plan` on "
            + (
                f"a pilot of {args.sample_rows} rows, each split's training rows grown to the training split's people"
                if args.sample_rows
                else "the whole data set"
            )
            + f", {args.plan_reps} collections per share on seeds "
            f"{args.plan_seed}–{args.plan_seed + args.plan_reps - 1}; measured on seeds 0–{args.reps - 1}."
        ),
        "",
        (
            "| data set | ε | planned share | forecast gain | majority | normsub, uniform | normsub, planned "
            "| planned − uniform | uniform − majority | planned − majority |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, chosen, gain, r in run_cells(cell, args, args.plan_reps, args.plan_seed, args.sample_rows):
        share = "uniform" if chosen is None else f"{chosen:g}"
        forecast = "" if chosen is None else f"{gain[0]:+.3f} ± {gain[1]:.3f}"
        lines.append(
            f"| {dataset} | {epsilon:g} | {share} | {forecast} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} "
            f"| {r[:, 2].mean():.3f} | {paired(r[:, 2] - r[:, 1])} | {paired(r[:, 1] - r[:, 0])} "
            f"| {paired(r[:, 2] - r[:, 0])} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
