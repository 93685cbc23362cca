"""Other ways to read the shipped bootstrap when choosing the smoothing strength: tried, not
shipped (README, *Estimators*).

    python bench/strength_rules.py [--reps 100] [--cells car:0.5,car:1,...] [--jobs 2]

For every run (the seeds and reports of ``bench/estimators.py``, protocol ``auto``, fast mode) the
shipped bootstrap (:func:`aggregator.strength.bootstrap_predictions`) is run once, and each rule
picks a strength from what it found; ``normsub`` takes the weakest strength within
:data:`~aggregator.strength.TIE` of the best mean accuracy. The rules:

- ``worst prior t``: the strength best in the worst of k + 1 test populations, the bootstrap's own
  and, for each class, one whose class prior is moved toward that class by ``t`` standard errors
  of the pooled class share (the records' posteriors reweighted; a model's accuracy is linear in
  the test population's class prior, so averaging over symmetric moves would change nothing);
- ``prior within δ``: the class prior alone (the strongest strength) whenever its expected accuracy
  is within ``δ`` of the best;
- ``mean − κ·sd``: the strength with the best mean less ``κ`` standard deviations over the draws;
- ``8 if gain < 0.01``: strength 8 where no strength beats the class prior by 0.01 in the
  bootstrap's world.

Writes bench/results/strength_rules.md: the paired difference of each rule with ``normsub`` on the
test rows, with its standard error; and, for the runs ``--runs`` names, each strength's expected
accuracy in the bootstrap's world beside its accuracy on the test rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import ALL_CELLS, cell_parser, paired, run_cells

from sim.datasets import load_dataset
from sim.experiment import run_once

RESULTS = Path(__file__).with_name("results") / "strength_rules.md"
CELLS = ALL_CELLS


def class_share_se(stats) -> float:
    """The standard error of a class's share in the pooled class prior (for a class of share 1/k)."""
    from aggregator.class_prior import class_share_variance

    k = stats.spec.n_classes
    weight = sum(1.0 / class_share_variance(o, s.n, k) for o, s in zip(stats.spec.oracles, stats.states) if s.n)
    return float(np.sqrt(1.0 / weight))


def rules() -> dict:
    """Rule name → a function of ``(hits, prior, se)`` returning the index of the strength it picks:
    ``hits[d, s, c]`` is draw ``d``'s mean over records of ``P(c | x)·1[ŷ_s(x) = c]`` (summed over
    ``c``: the expected accuracy), ``prior`` the bootstrap world's class prior."""
    from aggregator.strength import TIE

    def weakest_best(score):
        return int(np.flatnonzero(score >= score.max() - TIE)[0])

    def worst_prior(t):
        def pick(hits, prior, se):
            k = len(prior)
            moved = [prior] + [
                (1 - lam) * prior + lam * np.eye(k)[c]
                for c in range(k)
                for lam in [min(1.0, t * se / max(1 - prior[c], 1e-9))]
            ]
            per_class = hits.mean(axis=0) / np.maximum(prior, 1e-12)  # (S, k): recall of each class
            return weakest_best((per_class @ np.array(moved).T).min(axis=1))

        return pick

    def prior_within(delta):
        def pick(hits, prior, se):
            accuracy = hits.sum(axis=2).mean(axis=0)
            return len(accuracy) - 1 if accuracy[-1] >= accuracy.max() - delta else weakest_best(accuracy)

        return pick

    def risk_averse(kappa):
        def pick(hits, prior, se):
            accuracy = hits.sum(axis=2)
            return weakest_best(accuracy.mean(axis=0) - kappa * accuracy.std(axis=0, ddof=1))

        return pick

    def eight_if_flat(hits, prior, se):
        from aggregator.strength import STRENGTHS

        accuracy = hits.sum(axis=2).mean(axis=0)
        return STRENGTHS.index(8.0) if accuracy.max() - accuracy[-1] < 0.01 else weakest_best(accuracy)

    return (
        {f"worst prior {t:g}": worst_prior(t) for t in (0.5, 1, 2)}
        | {f"prior within {d:g}": prior_within(d) for d in (0.002, 0.005, 0.01, 0.02)}
        | {f"mean − {k:g}·sd": risk_averse(k) for k in (0.5, 1, 2)}
        | {"8 if gain < 0.01": eight_if_flat}
    )


def cell(dataset: str, epsilon: float, reps: int) -> tuple[str, float, np.ndarray]:
    """Per run: the majority class's, ``normsub``'s and every rule's test accuracy, shape ``(reps, 2 + rules)``."""
    from aggregator.estimators import ESTIMATORS, normsub_estimator, normsub_unsmoothed
    from aggregator.strength import STRENGTHS, bootstrap_predictions, statistics_seed

    found: dict[int, tuple] = {}

    def bootstrap(stats):
        key = statistics_seed(stats)
        if key not in found:
            predicted, posterior = bootstrap_predictions(stats, normsub_unsmoothed)
            k = posterior.shape[1]
            hits = (posterior[None, :, None, :] * (predicted[..., None] == np.arange(k))).mean(axis=1)
            base = normsub_unsmoothed(stats)
            found[key] = (hits, base.class_count / base.class_count.sum(), class_share_se(stats))
        return found[key]

    names = list(rules())
    for name, pick in rules().items():
        ESTIMATORS[name] = lambda stats, pick=pick: normsub_estimator(
            stats, STRENGTHS[pick(*bootstrap(stats))], temperature=1.0
        )
    data = load_dataset(dataset)
    runs = []
    for seed in range(reps):
        result = run_once(data, "auto", epsilon, seed, ("normsub", *names), mode="fast")
        runs.append([result.majority_accuracy, result.accuracy["normsub"]] + [result.accuracy[n] for n in names])
    return dataset, epsilon, np.array(runs)


def strengths_by_run(dataset: str, epsilon: float, seeds: list[int]) -> list[str]:
    """Table rows: per seed, the world's class prior and each strength's expected accuracy in the
    bootstrap's world and on the test rows."""
    from functools import partial

    from aggregator.estimators import ESTIMATORS, normsub_estimator, normsub_unsmoothed
    from aggregator.strength import STRENGTHS, bootstrap_accuracies

    seen = {}

    def probe(stats):
        base = normsub_unsmoothed(stats)
        seen["world"] = bootstrap_accuracies(stats, normsub_unsmoothed).mean(axis=0)
        seen["prior"] = base.class_count / base.class_count.sum()
        return normsub_estimator(stats, temperature=1.0)

    ESTIMATORS["probe"] = probe
    names = [f"strength {s:g}" for s in STRENGTHS]
    for name, strength in zip(names, STRENGTHS):
        ESTIMATORS[name] = partial(normsub_estimator, strength=strength)
    data = load_dataset(dataset)
    rows = []
    for seed in seeds:
        result = run_once(data, "auto", epsilon, seed, ("probe", *names), mode="fast")
        rows.append(
            f"| {dataset} | {epsilon:g} | {seed} | {' / '.join(f'{p:.2f}' for p in seen['prior'])} "
            f"| {' / '.join(f'{a:.3f}' for a in seen['world'])} "
            f"| {' / '.join(f'{result.accuracy[n]:.3f}' for n in names)} |"
        )
    return rows


def main() -> None:
    parser = cell_parser(__doc__, CELLS)
    parser.add_argument(
        "--runs",
        default="car:0.5:22,72,87,89,99;car:1:66,78",
        help="data set:ε:seeds whose strengths to show, ';'-separated",
    )
    args = parser.parse_args()
    done = run_cells(cell, args)
    names = list(rules())
    lines = [
        f"# Rules for reading the bootstrap (`python bench/strength_rules.py --reps {args.reps}`)",
        "",
        "Each rule's test accuracy less `normsub`'s, paired over the same runs, ± its standard error.",
        "",
        "| data set | ε | majority | normsub | normsub − majority | " + " | ".join(names) + " |",
        "|---|---|---|---|---|" + "---|" * len(names),
    ]
    for dataset, epsilon, runs in done:
        lines.append(
            f"| {dataset} | {epsilon:g} | {runs[:, 0].mean():.3f} | {runs[:, 1].mean():.3f} "
            f"| {paired(runs[:, 1] - runs[:, 0])} | "
            + " | ".join(paired(runs[:, 2 + j] - runs[:, 1]) for j in range(len(names)))
            + " |"
        )
    from aggregator.strength import STRENGTHS

    strengths = " / ".join(f"{s:g}" for s in STRENGTHS)
    lines += [
        "",
        f"Per run, each strength ({strengths}): its expected accuracy in the bootstrap's world and on the test rows.",
        "",
        "| data set | ε | seed | world's class prior | world | test rows |",
        "|---|---|---|---|---|---|",
    ]
    for spec in filter(None, args.runs.split(";")):
        dataset, epsilon, seeds = spec.split(":")
        lines += strengths_by_run(dataset, float(epsilon), [int(x) for x in seeds.split(",")])
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
