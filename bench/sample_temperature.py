"""The temperature fitted on a labelled public sample against the one the bootstrap chooses, and
the class prior pooled with the sample's (README, *A temperature from a labelled sample*).

    python bench/sample_temperature.py [--reps 100] [--sample-rows 300] [--cells car:0.5,...] [--jobs 2]

Per run (the seeds and reports of ``bench/estimators.py``: protocol ``auto``, fast mode), the
``normsub`` model at the temperature its bootstrap chooses, and the same model at the temperature
with the least log-loss on ``--sample-rows`` labelled records
(:func:`aggregator.calibration.fitted_temperature`): the first rows of the run's training split,
standing in for the public sample an operator drafts a spec from (other people of the same
population; the test rows are not among them). Scored on the test rows: log-loss in nats per
record, and beside it that of the training split's class shares (``class shares``, the constant;
not the private reports' prior that ``prior only`` is elsewhere).
Accuracy does not depend on the temperature. ``sample prior``: the class prior first pooled with
the sample's class shares (:func:`aggregator.calibration.pooled_with_sample`, the reports' standard
errors from the model's evidence, as ``aggregator model --calibrate --sample-prior`` does), then
the temperature fitted; its test accuracy beside ``normsub``'s and the majority class's.
Writes bench/results/sample_temperature.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "sample_temperature.md"


def cell(dataset: str, epsilon: float, reps: int, rows: int) -> tuple[str, float, np.ndarray]:
    """Per run, shape ``(reps, 9)``: test log-loss at the bootstrap's temperature, at the sample's,
    of the class shares; the two temperatures; with the sample prior, log-loss; test accuracy of
    ``normsub``, with the sample prior, and of the majority class."""
    from aggregator.calibration import expected_log_loss, fitted_temperature, pooled_with_sample
    from aggregator.estimators import build_model
    from aggregator.evidence import evidence
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, prior_log_loss, runner_for

    runner = runner_for(load_dataset(dataset))
    out = []
    for seed in range(reps):
        stats = runner.statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, mode="fast")
        model = build_model(stats, "normsub")
        train, test, _ = runner.split(seed)
        sample = train[:rows]
        fitted, _ = fitted_temperature(model.joint_log_likelihood_codes(runner.codes[sample]), runner.labels[sample])
        jll = model.joint_log_likelihood_codes(runner.codes[test])
        truth = np.eye(runner.k)[runner.labels[test]]
        chosen, at_sample = expected_log_loss(jll, truth, [model.temperature, fitted])
        constant = prior_log_loss(runner.labels[train], runner.labels[test])
        found = evidence(stats)
        reports = np.array([found["class_prior"][c] for c in model.spec.classes])
        errors = np.array([found["class_prior_standard_error"][c] for c in model.spec.classes])
        pooled = model.with_class_prior(pooled_with_sample(reports, errors, runner.labels[sample])[0])
        tau, _ = fitted_temperature(pooled.joint_log_likelihood_codes(runner.codes[sample]), runner.labels[sample])
        pooled_jll = pooled.joint_log_likelihood_codes(runner.codes[test])
        (with_prior,) = expected_log_loss(pooled_jll, truth, [tau])
        labels = runner.labels[test]
        majority = np.mean(labels == np.bincount(runner.labels[train], minlength=runner.k).argmax())
        accuracy = [np.mean(j.argmax(axis=1) == labels) for j in (jll, pooled_jll)]
        out.append([chosen, at_sample, constant, model.temperature, fitted, with_prior, *accuracy, majority])
    return dataset, epsilon, np.array(out)


def main() -> None:
    parser = cell_parser(__doc__, ALL_CELLS)
    parser.add_argument("--sample-rows", type=int, default=300, help="labelled rows the temperature is fitted on")
    args = parser.parse_args()
    done = run_cells(cell, args, args.sample_rows)
    lines = [
        f"# The temperature from a labelled sample (`python bench/sample_temperature.py --reps {args.reps} "
        f"--sample-rows {args.sample_rows}`)",
        "",
        f"Protocol `auto`, fast mode, seeds 0–{args.reps - 1}. Test log-loss, nats per record; paired "
        "differences ± standard error. `bootstrap`: the temperature `normsub` chooses from its reports; "
        f"`sample`: the one with the least log-loss on {args.sample_rows} labelled rows; `class shares`: the "
        "training split's, as every record's probabilities.",
        "",
        "| data set | ε | class shares | bootstrap | sample | sample − bootstrap | sample − class shares "
        "| median τ bootstrap / sample |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in done:
        lines.append(
            f"| {dataset} | {epsilon:g} | {r[:, 2].mean():.3f} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} "
            f"| {paired(r[:, 1] - r[:, 0])} | {paired(r[:, 1] - r[:, 2])} "
            f"| {np.median(r[:, 3]):.2f} / {np.median(r[:, 4]):.2f} |"
        )
    lines += [
        "",
        "With the sample prior: the class prior pooled with the sample's class shares, then the temperature "
        "fitted. Test accuracy (paired ± standard error) and log-loss.",
        "",
        "| data set | ε | majority | normsub | sample prior | sample prior − normsub | sample prior − majority "
        "| log-loss sample prior | − sample's τ alone |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, r in done:
        lines.append(
            f"| {dataset} | {epsilon:g} | {r[:, 8].mean():.3f} | {r[:, 6].mean():.3f} | {r[:, 7].mean():.3f} "
            f"| {paired(r[:, 7] - r[:, 6])} | {paired(r[:, 7] - r[:, 8])} | {r[:, 5].mean():.3f} "
            f"| {paired(r[:, 5] - r[:, 1])} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
