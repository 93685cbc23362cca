"""Why ``normsub`` loses to ``strength 1`` on Australian at small ε, and what was tried (README,
*Estimators*).

    python bench/world_floor.py [--reps 100] [--table-reps 100] [--first-seed 0] [--jobs 2] [--out FILE]

The bootstrap (:func:`aggregator.strength.choose_strength`) draws from the empirical-Bayes
posterior mean, each class's conditional shrunk toward uniform by ``noise / (noise + spread)``,
the spread estimated from the class's own deviations. A binary feature gives one degree of
freedom per class: at ε = 0.5 a strong feature's deviation is about one standard deviation of
its noise, the spread comes out near zero, and the world is flat where the population is not
(Australian after DCA to one component: 0.86 accuracy non-private). Its world then favours the
class prior, and the null world, weighted by a dependence test of little power, favours it too.
``normsub`` now floors a two-valued feature's spread at a flat prior's (1/12,
:data:`aggregator.strength.FLAT_SPREAD`).

Variants, each paired with ``normsub`` on the same reports:

- ``no floor``: the world as before that floor;
- ``floor everywhere``: every feature's spread at least a flat Dirichlet prior's,
  ``(d − 1) / (d² (d + 1))`` per share, not only two-valued ones';
- ``floor, no null``: the shipped world without the null world;
- ``null at odds 1:2``: the null world's weight at prior odds of 1 : 2 against it instead of
  even odds (Sellke's bound on the Bayes factor ``B`` as shipped, then ``B/2 / (1 + B/2)``, at most
  one third): a prior that believes a declared feature more likely to matter than not;
- ``null at odds 4:1``: the other way, ``4B / (1 + 4B)`` (at most 0.8): a prior that believes a
  declared feature more likely not to matter, for car at ε ≤ 1, where noise the plug-in world
  keeps as signal outvotes an uneven class prior;
- ``posterior mean world``: the bootstrap whatever the class prior, its plug-in world the
  posterior mean, as before the spread-matched world and strength 1 for even classes;
- ``bootstrap everywhere``: the bootstrap whatever the class prior (its world as shipped), as
  before strength 1 for classes closer to even than 0.95;
- ``strength 1``, for what is left.

Cells: Australian (all of its binned features have two values), discrete DE and OUE, original
features and PCA / DCA to one component, at ε = 0.5 and 1 (fast mode, ``--reps`` seeds), and the
rows of the estimators table where the null world was measured (car at 0.5 and 1, chess and
mushroom at 0.5, and car at 2) and mushroom at ε = 0.1, where five of its features have two values (protocol
``auto``, ``--table-reps`` seeds); and car cut to one feature (``doors``, ``lug_boot``) at ε = 0.5
and 1: a collection of one feature, as Australian's projections are, but one whose feature tells
car's uneven classes little, the case the null world is for (``--table-reps`` seeds). Writes
bench/results/world_floor.md (``--out`` another file, for another ``--first-seed``).
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from tqdm import tqdm

RESULTS = Path(__file__).with_name("results") / "world_floor.md"
VARIANTS = (
    "no floor",
    "floor everywhere",
    "floor, no null",
    "null at odds 1:2",
    "null at odds 4:1",
    "posterior mean world",
    "bootstrap everywhere",
    "strength 1",
)
# Car at ε = 2 is where more weight on the null world would cost: its features beat the class prior.
TABLE_CELLS = (("car", 0.5), ("car", 1.0), ("car", 2.0), ("chess", 0.5), ("mushroom", 0.5), ("mushroom", 0.1))
# Car cut to one of its features (its column): one feature, as after a projection to one component.
ONE_FEATURE_CELLS = (("car", 2, 0.5), ("car", 2, 1.0), ("car", 4, 0.5), ("car", 4, 1.0))


def dirichlet_floor(d: int) -> float:
    """A symmetric Dirichlet(1) prior's variance per share of a feature of ``d`` values."""
    return (d - 1) / (d**2 * (d + 1))


def variant(
    stats, world: str | None, null: bool, odds: float = 1.0, matched: bool | None = None, keep_even: bool = True
):
    """``normsub`` with its strength chosen by the bootstrap in the plug-in ``world`` (None: the
    shipped one; ``"none"``: without a floor; ``"everywhere"``: :func:`dirichlet_floor` for every
    feature), with or without the ``null`` world, weighted at prior ``odds`` for it (1: even, as
    shipped). The plug-in world is spread-matched where the class prior is about even, as
    shipped (``matched`` None), or never (False); ``keep_even``: strength 1 without a bootstrap
    where the class prior is closer still to even, as shipped."""
    from aggregator import strength as S
    from aggregator.dependence import dependence_p_value, null_probability
    from aggregator.estimators import normsub_unsmoothed

    derive = partial(normsub_unsmoothed, target="uniform")
    base = derive(stats)
    evenness = S.prior_evenness(base.class_count)
    if keep_even and evenness > S.EVEN_KEEPS_WEAKEST:
        return base.model(stats.spec, S.STRENGTHS[0])
    even = evenness > S.EVEN_PRIOR if matched is None else matched
    name = "spread-matched" if even else "plug-in"
    shipped = S.WORLDS[name]
    if world is not None:
        floor = dirichlet_floor if world == "everywhere" else (lambda d: 0.0)
        S.WORLDS[name] = (partial(S.plug_in_truth, floor=floor, spread_matched=even), shipped[1])
    try:
        score = S.bootstrap_accuracies(stats, derive, base, world=name).mean(axis=0)
    finally:
        S.WORLDS[name] = shipped
    if null:
        weight = null_probability(dependence_p_value(stats, base.class_count))
        factor = odds * weight / (1 - weight)  # the shipped weight is B / (1 + B) at even odds
        weight = factor / (1 + factor)
        score = weight * S.bootstrap_accuracies(stats, derive, base, world="null").mean(axis=0) + (1 - weight) * score
    strength = S.STRENGTHS[int(np.flatnonzero(score >= score.max() - S.TIE)[0])]
    return base.model(stats.spec, strength)


def cell(
    dataset: str, protocol: str, reduce: str | None, epsilon: float, reps: int, first: int, column: int | None = None
) -> tuple:
    """Per run (shape ``(reps, 1 + len(VARIANTS))``, seeds ``first`` on): ``normsub``'s accuracy
    and each variant's; ``column``: the data set cut to that one feature."""
    import dataclasses

    from aggregator import estimators
    from sim.datasets import load_dataset
    from sim.experiment import Setup, run_once

    estimators.ESTIMATORS["no floor"] = partial(variant, world="none", null=True)
    estimators.ESTIMATORS["floor everywhere"] = partial(variant, world="everywhere", null=True)
    estimators.ESTIMATORS["floor, no null"] = partial(variant, world=None, null=False)
    estimators.ESTIMATORS["null at odds 1:2"] = partial(variant, world=None, null=True, odds=0.5)
    estimators.ESTIMATORS["null at odds 4:1"] = partial(variant, world=None, null=True, odds=4.0)
    estimators.ESTIMATORS["posterior mean world"] = partial(variant, world=None, null=True, matched=False, keep_even=False)
    estimators.ESTIMATORS["bootstrap everywhere"] = partial(variant, world=None, null=True, keep_even=False)
    estimators.ESTIMATORS["strength 1"] = partial(estimators.normsub_estimator, strength=1.0)
    data = load_dataset(dataset)
    if column is not None:
        data = dataclasses.replace(data, X=data.X[:, [column]], feature_names=(data.feature_names[column],))
    setup = Setup("discrete", None, reduce, 1 if reduce else None) if data.continuous else None
    names = ("normsub", *VARIANTS)
    runs = [
        run_once(data, protocol, epsilon, seed, names, setup=setup, mode="fast") for seed in range(first, first + reps)
    ]
    name = dataset if column is None else f"{dataset} ({data.feature_names[0]} only)"
    return name, protocol, reduce, epsilon, np.array([[r.accuracy[n] for n in names] for r in runs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100, help="seeds per Australian cell")
    parser.add_argument("--table-reps", type=int, default=100, help="seeds per estimators-table cell")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed of every cell")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the table")
    args = parser.parse_args()
    cells = [
        ("australian", protocol, reduce, epsilon, args.reps, args.first_seed)
        for reduce in (None, "pca", "dca")
        for protocol in ("DE", "OUE")
        for epsilon in (0.5, 1.0)
    ]
    cells += [(dataset, "auto", None, epsilon, args.table_reps, args.first_seed) for dataset, epsilon in TABLE_CELLS]
    cells += [
        (dataset, "auto", None, epsilon, args.table_reps, args.first_seed, column)
        for dataset, column, epsilon in ONE_FEATURE_CELLS
    ]
    runs = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(cell)(*c) for c in cells)
    lines = [
        (
            f"# The bootstrap's world on few cells (`python bench/world_floor.py --reps {args.reps} "
            f"--table-reps {args.table_reps}" + (f" --first-seed {args.first_seed}" if args.first_seed else "") + "`)"
        ),
        "",
        (
            f"Fast mode, seeds {args.first_seed}–{args.first_seed + max(args.reps, args.table_reps) - 1}. "
            "Each variant's paired difference with `normsub` (± standard error)."
        ),
        "",
        "| data set | protocol | features | ε | runs | normsub | "
        + " | ".join(f"{v} − normsub" for v in VARIANTS)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(VARIANTS),
    ]
    for dataset, protocol, reduce, epsilon, r in tqdm(runs, total=len(cells), desc="cells"):
        gains = [r[:, j] - r[:, 0] for j in range(1, r.shape[1])]
        lines.append(
            f"| {dataset} | {protocol} | {reduce.upper() + ' to 1' if reduce else 'original'} | {epsilon:g} "
            f"| {len(r)} | {r[:, 0].mean():.3f} | "
            + " | ".join(f"{g.mean():+.3f} ± {g.std(ddof=1) / np.sqrt(len(g)):.3f}" for g in gains)
            + " |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
