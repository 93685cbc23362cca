"""The smoothing strength a labelled public sample chooses, against the one the service's bootstrap
chooses (README, *A temperature from a labelled sample*).

    python bench/sample_strength.py [--reps 100] [--first-seed 0] [--sample-rows 300] [--cells car:0.5,...] [--jobs 2]

Per run (the seeds and reports of ``bench/estimators.py``: protocol ``auto``, fast mode), what
``python -m aggregator model ID --calibrate sample.csv --sample-strength`` does: the served
``normsub`` model and the model at each strength of :data:`aggregator.strength.STRENGTHS` (what
``/model?strength=`` answers) are scored on ``--sample-rows`` labelled records, the first rows of
the run's training split (standing in for an operator's public sample of the same population; the
test rows are not among them), and a strength replaces the served one only where it leads it there
by more than one standard error of the paired difference
(:func:`aggregator.calibration.strength_from_sample`). ``both``: the class prior first pooled with
the sample's (``--sample-prior``), then the strength chosen the same way. A cell ``data set@share``
runs on a subsample whose most common class holds ``share`` of the rows
(:func:`paired_runs.cell_dataset`). Test accuracy, paired ± standard error, beside the majority
class (the training split's). ``--lead`` scores other thresholds than the shipped one (in standard
errors). Writes bench/results/sample_strength.md (``--out``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_dataset, cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "sample_strength.md"
CELLS = ALL_CELLS + ",chess@0.75:0.5,chess@0.75:1,mushroom@0.75:0.5,mushroom@0.75:1,chess@0.9:1,mushroom@0.9:1"


def test_accuracy(model, codes: np.ndarray, labels: np.ndarray) -> float:
    """The share of the records ``codes`` whose class ``model`` predicts as ``labels`` holds."""
    return float(np.mean(model.joint_log_likelihood_codes(codes).argmax(axis=1) == labels))


def sample_choice(served, others: list, lead: float, codes: np.ndarray, labels: np.ndarray):
    """``served``, or the model of ``others`` the labelled sample (``codes``, ``labels``) prefers by
    more than ``lead`` standard errors (:func:`aggregator.calibration.strength_from_sample`)."""
    from aggregator.calibration import strength_from_sample

    jll = [m.joint_log_likelihood_codes(codes) for m in (served, *others)]
    index, _, _ = strength_from_sample(jll[0], jll[1:], labels, lead)
    return served if index is None else others[index]


def cell(dataset: str, epsilon: float, reps: int, first_seed: int, rows: int, leads: tuple[float, ...]) -> tuple:
    """Per run, shape ``(reps, 4 + len(leads))``: test accuracy of the majority class, ``normsub``,
    with the sample prior, with the sample prior and the strength it then chooses; then with the
    strength the sample chooses at each of ``leads``."""
    from aggregator.calibration import pooled_with_sample
    from aggregator.estimators import build_model
    from aggregator.evidence import evidence
    from aggregator.strength import STRENGTHS
    from sim.experiment import DEFAULT_THETA, runner_for

    runner = runner_for(cell_dataset(dataset))
    out = []
    for seed in range(first_seed, first_seed + reps):
        stats = runner.statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, mode="fast")
        served = build_model(stats, "normsub", temperature=1.0)  # accuracy alone: no temperature's bootstrap
        candidates = [build_model(stats, "normsub", temperature=1.0, strength=s) for s in STRENGTHS]
        train, test, _ = runner.split(seed)
        sample, labels = runner.codes[train[:rows]], runner.labels[train[:rows]]
        accuracy = partial(test_accuracy, codes=runner.codes[test], labels=runner.labels[test])
        chosen = partial(sample_choice, codes=sample, labels=labels)

        found = evidence(stats)
        reports = np.array([found["class_prior"][c] for c in stats.spec.classes])
        errors = np.array([found["class_prior_standard_error"][c] for c in stats.spec.classes])
        prior, _ = pooled_with_sample(reports, errors, labels)
        pooled = [m.with_class_prior(prior) for m in (served, *candidates)]
        majority = np.mean(runner.labels[test] == np.bincount(runner.labels[train], minlength=runner.k).argmax())
        out.append(
            [
                majority,
                accuracy(served),
                accuracy(pooled[0]),
                accuracy(chosen(pooled[0], pooled[1:], leads[0])),
                *(accuracy(chosen(served, candidates, lead)) for lead in leads),
            ]
        )
    return dataset, epsilon, np.array(out)


def main() -> None:
    from aggregator.calibration import SAMPLE_LEAD

    parser = cell_parser(__doc__, CELLS)
    parser.add_argument("--first-seed", type=int, default=0, help="the first run's seed")
    parser.add_argument("--sample-rows", type=int, default=300, help="labelled rows the strength is chosen on")
    parser.add_argument(
        "--lead",
        default=f"{SAMPLE_LEAD:g},0,1.64,2",
        help="leads (standard errors) to score, comma-separated; the first is also used with the sample prior",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    leads = tuple(float(x) for x in args.lead.split(","))
    last = args.first_seed + args.reps - 1
    lines = [
        (
            f"# The strength a labelled sample chooses (`python bench/sample_strength.py --reps {args.reps} "
            f"--first-seed {args.first_seed} --sample-rows {args.sample_rows} --lead {args.lead} --cells {args.cells}`)"
        ),
        "",
        (
            f"Protocol `auto`, fast mode, seeds {args.first_seed}–{last}; the sample is the first {args.sample_rows} "
            "rows of each run's training split. Test accuracy, paired differences ± standard error. "
            f"`sample strength`: the strength the sample chooses at a lead of {leads[0]:g} standard errors; "
            "`sample prior`: the class prior pooled with the sample's; `both`: the prior, then the strength."
        ),
        "",
        (
            "| cell | majority | normsub | normsub − majority | sample strength − normsub | sample strength − majority "
            "| sample prior − majority | both − majority | "
            + " | ".join(f"lead {lead:g}: − normsub" for lead in leads[1:])
            + " |"
        ),
        "|---|---|---|---|---|---|---|---|" + "---|" * (len(leads) - 1),
    ]
    for dataset, epsilon, r in run_cells(cell, args, args.first_seed, args.sample_rows, leads):
        majority, normsub = r[:, 0], r[:, 1]
        lines.append(
            f"| {dataset} ε={epsilon:g} | {majority.mean():.3f} | {normsub.mean():.3f} | {paired(normsub - majority)} "
            f"| {paired(r[:, 4] - normsub)} | {paired(r[:, 4] - majority)} | {paired(r[:, 2] - majority)} "
            f"| {paired(r[:, 3] - majority)} | "
            + " | ".join(paired(r[:, 4 + i] - normsub) for i in range(1, len(leads)))
            + " |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
