"""What reporting the class input more often buys and costs (the estimators' research notes).

    python research/class_share.py [--reps 100] [--cells car:0.5,...] [--shares 0.1,0.25,0.4] [--jobs 2] [--out FILE]

Each person reports one input. By default it is chosen uniformly, so with n features a share
``1/(n + 1)`` of the people report the class, and the class prior is estimated from them and from
the class columns of the features' joint reports. On car at ε = 0.5 that prior names the wrong
majority class in a few runs in a hundred, which no estimator can repair. An operator who expects
uneven classes can send a larger share of people to the class input: the spec's ``class_share``,
which every device follows (or an ``"assigned"`` collection whose groups
:func:`participant.reporting.choose_inputs` draws with it).

For every cell (protocol ``auto``, fast mode, the seeds of ``bench/estimators.py``: the same
splits) and every share, ``normsub`` and ``prior only`` (its class prior with uniform
conditionals) beside the majority class, how often the reports' class prior names the wrong
majority, and ``normsub``'s paired difference with the uniform choice (the same splits; the
reports differ, since other people report other inputs) and with the majority class; beside the
measured wrong majorities and ``prior only``'s loss, what the planner (``python -m aggregator
spec --people``, :mod:`aggregator.estimation.planning`) predicts for them. Diabetes is binned into the paper's four bins per coordinate. Writes
research/results/class_share.md (or ``--out``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

from sim.datasets import load_dataset
from sim.experiment import Setup, run_once

RESULTS = Path(__file__).with_name("results") / "class_share.md"
CELLS = ",".join([*ALL_CELLS.split(",")[:11], "connect-4:0.5", "connect-4:1", "diabetes:0.5", "diabetes:1"])


def cell(dataset: str, epsilon: float, reps: int, shares: list[float | None]) -> tuple[str, float, dict]:
    """Per share (None: uniform), an array ``(reps, 3)``: the majority class's, ``normsub``'s and
    ``prior only``'s accuracy in each run; and the planner's :class:`~aggregator.estimation.planning.MajorityOutlook`
    for the training split's number of people, the whole data set's class shares taken as the
    population's (what ``python -m aggregator spec --people`` says from a sample)."""
    from dataclasses import replace

    from estimators import register

    from aggregator.estimation.planning import majority_outlook
    from participant import encode_labels
    from sim.experiment import DEFAULT_THETA, spec_for, split

    register()
    data = load_dataset(dataset)
    setup = Setup() if data.continuous else None
    spec = spec_for(data, "auto", epsilon, DEFAULT_THETA, setup, data.X, data.y)
    prior = np.bincount(encode_labels(data.y, spec), minlength=spec.n_classes) / len(data.y)
    people = len(split(data, 0)[2])
    out, planned = {}, {}
    for share in shares:
        runs = [
            run_once(
                data, "auto", epsilon, seed, ("normsub", "prior only"), setup=setup, mode="fast", class_share=share
            )
            for seed in range(reps)
        ]
        out[share] = np.array([[r.majority_accuracy, r.accuracy["normsub"], r.accuracy["prior only"]] for r in runs])
        planned[share] = majority_outlook(replace(spec, class_share=share), prior, people)
    return dataset, epsilon, out, planned


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    parser.add_argument("--shares", default="0.1,0.25,0.4", help="class shares to compare with the uniform choice")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the table's file (default {RESULTS})")
    args = parser.parse_args()
    shares = [None, *(float(s) for s in args.shares.split(","))]
    lines = [
        "# Reporting the class input more often",
        "",
        (
            f"`python research/class_share.py --reps {args.reps} --cells {args.cells} --shares {args.shares}`: "
            f"protocol `auto`, fast mode, seeds 0–{args.reps - 1}."
        ),
        "`wrong majority`: runs where `prior only` scores below the majority class (the reports name another class).",
        (
            "`planned`: what `python -m aggregator spec --people` predicts from the data set's class shares for "
            "the training split's people (`aggregator/planning.py`): how often the reports name another class, "
            "and what `prior only` loses to the majority class on average."
        ),
        "",
        (
            "| data set | ε | class share | majority | prior only | wrong majority | planned | prior only − majority "
            "| planned | normsub | normsub − majority | normsub − uniform |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, out, planned in run_cells(cell, args, shares):
        inputs = load_dataset(dataset)
        uniform = out[None]
        for share, r in out.items():
            label = f"uniform ({1 / n_inputs(inputs):.3f})" if share is None else f"{share:g}"
            wrong = np.mean(r[:, 2] < r[:, 0] - 1e-12)
            vs_uniform = "" if share is None else paired(r[:, 1] - uniform[:, 1])
            plan = planned[share]
            lines.append(
                f"| {dataset} | {epsilon:g} | {label} | {r[:, 0].mean():.3f} | {r[:, 2].mean():.3f} | {wrong:.0%} "
                f"| {plan.wrong:.1%} | {paired(r[:, 2] - r[:, 0])} | {-plan.cost:+.3f} "
                f"| {r[:, 1].mean():.3f} | {paired(r[:, 1] - r[:, 0])} | {vs_uniform} |"
            )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def n_inputs(data) -> int:
    """How many inputs a person of ``data`` chooses among: the class and one per (binned) feature."""
    from sim.experiment import spec_for

    return spec_for(data, "DE", 1.0, setup=Setup() if data.continuous else None).n_inputs


if __name__ == "__main__":
    main()
