"""Where the reports' class prior is uneven and they show no class dependence, should the class
prior decide? Tried, not shipped (README, *Estimators*).

    python bench/uneven_gate.py [--reps 100] [--first-seed 0] [--cells car:0.5,...] [--null-draws 12] [--jobs 2]

A cell ``data set@share:ε`` runs on a subsample of the data set whose most common class holds
``share`` of the rows (:func:`paired_runs.cell_dataset`): mushroom and chess with uneven classes,
whose many weak features the table's data sets do not combine with an uneven prior. For every run (the seeds and reports of ``bench/estimators.py``,
protocol ``auto``, fast mode) it records the prior's evenness
(:func:`aggregator.strength.prior_evenness`), the dependence p-value
(:func:`aggregator.dependence.dependence_p_value`), and the test accuracy of ``normsub``, of
``prior only`` and of the majority class. Two gates that predict the class prior where the
evenness is at most :data:`~aggregator.strength.EVEN_PRIOR`:

- ``p > α``: the reports show no dependence at level α (0.05, 0.1, 0.2);
- ``gain within the null's``: the bootstrap's gain of its best strength over the class prior in
  the plug-in world, no larger than that gain in at least ``r`` of ``--null-draws`` collections
  drawn from the null world (no feature tells the classes apart) and read the same way.

Writes bench/results/uneven_gate.md (``--out``): per cell the gated model's paired difference with
``normsub`` (how many runs the gate closed) and with the majority class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import cell_dataset, cell_parser, paired, probed_runs, run_cells

RESULTS = Path(__file__).with_name("results") / "uneven_gate.md"
CELLS = (
    "car:0.5,car:1,car:2,car:4,connect-4:0.5,connect-4:1,"
    "mushroom@0.75:0.5,mushroom@0.75:1,chess@0.75:0.5,chess@0.75:1,mushroom@0.9:1,chess@0.9:1"
)
ALPHAS = (0.05, 0.1, 0.2)
NULL_RANKS = (0, 2)


def cell(dataset: str, epsilon: float, reps: int, first_seed: int, null_draws: int) -> tuple:
    """Every run's evenness, p-value, gains (observed and in the null's draws) and test accuracies."""
    from estimators import prior_only, register  # bench/estimators.py

    from aggregator.dependence import dependence_p_value
    from aggregator.estimators import ESTIMATORS, normsub_unsmoothed
    from aggregator.strength import (
        EVEN_PRIOR,
        bootstrap_accuracies,
        draw_statistics,
        null_truth,
        prior_evenness,
        statistics_seed,
    )

    register()
    found: list[dict] = []

    def gain(stats) -> float:
        accuracy = bootstrap_accuracies(stats, normsub_unsmoothed, world="plug-in").mean(axis=0)
        return float(accuracy.max() - accuracy[-1])

    def probe(stats):
        base = normsub_unsmoothed(stats)
        run = {"even": prior_evenness(base.class_count), "p": dependence_p_value(stats, base.class_count)}
        if run["even"] <= EVEN_PRIOR and null_draws:
            rng = np.random.default_rng(statistics_seed(stats) + 7)
            truth = null_truth(stats, base)
            observed = gain(stats)
            run["rank"] = sum(gain(draw_statistics(truth, stats, rng)) >= observed for _ in range(null_draws))
        found.append(run)
        return prior_only(stats)

    ESTIMATORS["probe"] = probe
    return dataset, epsilon, probed_runs(cell_dataset(dataset), epsilon, range(first_seed, first_seed + reps), found)


def main() -> None:
    from aggregator.strength import EVEN_PRIOR

    parser = cell_parser(__doc__, CELLS)
    parser.add_argument("--first-seed", type=int, default=0, help="the first run's seed")
    parser.add_argument("--null-draws", type=int, default=12, help="null-world collections per run (0: skip)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    gates = {f"p > {a:g}": (lambda r, a=a: r["p"] > a) for a in ALPHAS}
    if args.null_draws:
        gates |= {
            f"gain within the null's (beaten by ≥ {q + 1} of {args.null_draws})": (lambda r, q=q: r.get("rank", 0) > q)
            for q in NULL_RANKS
        }
    last = args.first_seed + args.reps - 1
    lines = [
        (
            f"# The class prior where it is uneven and the reports show no dependence (`python bench/uneven_gate.py "
            f"--reps {args.reps} --first-seed {args.first_seed} --null-draws {args.null_draws} --cells {args.cells}`)"
        ),
        "",
        (
            f"Seeds {args.first_seed}–{last}, protocol `auto`, fast mode. A gate predicts the class prior "
            f"(`prior only`) where the reports' prior has an evenness of at most {EVEN_PRIOR} and the gate closes, "
            "`normsub` elsewhere. Each gate column: gated − normsub (runs closed) → gated − majority."
        ),
        "",
        "| cell | majority | normsub − majority | prior only − majority | median p | " + " | ".join(gates) + " |",
        "|---|---|---|---|---|" + "---|" * len(gates),
    ]
    for dataset, epsilon, runs in run_cells(cell, args, args.first_seed, args.null_draws):
        col = {key: np.array([r.get(key, 0) for r in runs]) for key in runs[0]}
        line = (
            f"| {dataset} ε={epsilon:g} | {col['majority'].mean():.3f} | {paired(col['normsub'] - col['majority'])} "
            f"| {paired(col['prior'] - col['majority'])} | {np.median(col['p']):.3f} |"
        )
        for gate in gates.values():
            closed = np.array([gate(r) and r["even"] <= EVEN_PRIOR for r in runs])
            gated = np.where(closed, col["prior"], col["normsub"])
            line += f" {paired(gated - col['normsub'])} ({closed.sum()}) → {paired(gated - col['majority'])} |"
        lines.append(line)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
