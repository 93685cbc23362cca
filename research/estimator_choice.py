"""The estimator a collection needs, chosen from its reports: ``auto`` against ``normsub`` (the
default) and ``paper`` on the fourteen problems, its one constant chosen leaving one data set out.

    python research/estimator_choice.py [--reps 20] [--eps 0.5,1,2,4] [--problems car,adult,...] [--jobs 1]

For every problem of ``bench/problems.py`` and every ε, ``--reps`` paired runs (seeds 0, 1, …; a
random 80/20 split, every training row one person with one report, protocol ``auto``, exact fast
mode drawn as two halves by a fair coin per person, :meth:`sim.experiment.Runner.statistics` with
``halves``): on the same reports, the test accuracy of ``normsub``, ``paper`` and ``ibu``, and for
each held-out score of :mod:`aggregator.estimation.choice` (``joint``, ``conditional``, ``accuracy``) each
candidate's score gain over the default and its standard error; and the same for a fourth score
tried here only, ``plug-in`` (:func:`plug_in_choice`: each candidate fitted on one half, its
accuracy on the conditionally independent population the other half estimates). The rule's pick
at any ``Z`` is then read off those, so every rule is scored on the very runs the estimators are.

The rule's constants (the score, and ``Z`` of :data:`ZS`) are chosen leaving one data set out: for
each problem, the pair whose ``auto`` has the highest mean accuracy over the other thirteen
problems' cells (ties: the larger ``Z``, the one that leaves the default more often), scored on the
held-out problem, once among the scores ``auto`` offers and once with ``plug-in`` among them. Runs
are kept per cell in ``research/results/estimator_choice/`` (the plug-in score's in ``plug-in/``;
a cell already there is not run again); the tables go to ``research/results/estimator_choice.md``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems
from problems import PROBLEMS, load_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the studies' helpers, also when imported as research.estimator_choice
from paired_runs import cached

RESULTS = Path(__file__).with_name("results")
RUNS = RESULTS / "estimator_choice"
TABLE = RESULTS / "estimator_choice.md"
ESTIMATORS = ("normsub", "paper", "ibu")
# The scores aggregator.estimation.choice offers, and the plug-in score tried beside them (here only).
OFFERED = ("joint", "conditional", "accuracy")
SCORES = (*OFFERED, "plug-in")
ZS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
# Feature vectors the plug-in score draws per direction (seeded, so a collection's score is fixed).
PLUG_IN_DRAWS = 4000
LARGE = 1000


def collections(problem: str, epsilon: float, reps: int):
    """Each run of one (problem, ε) cell: ``(runner, seed, statistics)`` for seeds 0 … reps − 1,
    the collection drawn as two halves in exact fast mode (protocol ``auto``, one report each)."""
    warnings.simplefilter("ignore")
    from sim.experiment import runner_for

    runner = runner_for(load_problem(problem))
    setting = ("auto", epsilon, None, "one-report")
    for seed in range(reps):
        yield runner, seed, runner.statistics(setting, seed, mode="fast", halves=True)


def cell(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    """Every run of one (problem, ε) cell, one row each."""
    from aggregator.estimation.estimators import build_model, estimator_choice

    rows = []
    for runner, seed, stats in collections(problem, epsilon, reps):
        models = [build_model(stats, name, temperature=1.0) for name in ESTIMATORS]
        accuracy, _ = runner._score(models, seed, log_loss=False)
        _, test, _ = runner.split(seed)
        counts = np.bincount(runner.labels[test], minlength=runner.k)
        row = {"problem": problem, "eps": epsilon, "seed": seed, "people": stats.n_reports,
               "best constant": float(counts.max() / counts.sum()),
               **{name: float(a) for name, a in zip(ESTIMATORS, accuracy)}}  # fmt: skip
        for score in OFFERED:
            choice = estimator_choice(stats.halves, ESTIMATORS, score)
            for name in ESTIMATORS[1:]:
                row[f"{score} gain {name}"] = choice.gains[name]
                row[f"{score} se {name}"] = choice.errors[name]
        rows.append(row)
    return pd.DataFrame(rows)


def plug_in_population(stats) -> tuple[np.ndarray, list[np.ndarray]]:
    """The conditionally independent population ``stats`` estimate: the class shares (shape
    ``(k,)``) and each feature's ``P(a | c)`` (shape ``(k, n_i)``) from ``normsub``'s consistent
    counts before smoothing (non-negative; a class with no count left: uniform)."""
    from aggregator.estimation.estimators import normsub_unsmoothed

    base = normsub_unsmoothed(stats)
    prior = base.class_count / base.class_count.sum()
    conditionals = []
    for table in base.tables:
        totals = table.sum(axis=1, keepdims=True)
        conditionals.append(np.where(totals > 0, table / np.where(totals > 0, totals, 1.0), 1.0 / table.shape[1]))
    return prior, conditionals


def plug_in_accuracies(models, population, rng, draws: int = PLUG_IN_DRAWS) -> np.ndarray:
    """Each of ``models``' accuracy on ``population`` (:func:`plug_in_population`), per drawn
    feature vector: shape ``(len(models), draws)``, the probability the population gives the
    class the model predicts for a vector drawn from it (its mean over the draws is the
    accuracy; every model scored on the same draws)."""
    prior, conditionals = population
    classes = rng.choice(len(prior), size=draws, p=prior)
    codes = np.empty((draws, len(conditionals)), dtype=np.int64)
    log_joint = np.tile(np.log(prior), (draws, 1))
    with np.errstate(divide="ignore"):
        for i, table in enumerate(conditionals):
            cumulative = np.cumsum(table, axis=1)[classes]
            codes[:, i] = np.minimum((rng.random(draws)[:, None] > cumulative).sum(axis=1), table.shape[1] - 1)
            log_joint += np.log(table[:, codes[:, i]].T)
    posterior = np.exp(log_joint - log_joint.max(axis=1, keepdims=True))
    posterior /= posterior.sum(axis=1, keepdims=True)
    predicted = np.stack([np.argmax(m.joint_log_likelihood_codes(codes), axis=1) for m in models])
    return posterior[np.arange(draws), predicted]


def plug_in_choice(halves) -> tuple[np.ndarray, np.ndarray]:
    """The plug-in score: each candidate of :data:`ESTIMATORS` fitted on one half, its accuracy
    on the conditionally independent population the other half estimates, less the default's
    (halves swapped and averaged), shape ``(candidates,)``; and a standard error of each
    difference: the two directions' half-difference (an unbiased one-degree-of-freedom estimate of
    the variance of their mean) with the draws' own variance."""
    from aggregator.estimation.estimators import build_model

    first, second = (h.people() for h in halves)
    gains, draws_var = [], []
    for direction, (fit, scored) in enumerate(((first, second), (second, first))):
        models = [build_model(fit, name, temperature=1.0) for name in ESTIMATORS]
        rights = plug_in_accuracies(models, plug_in_population(scored), np.random.default_rng(direction))
        diff = rights - rights[0]
        gains.append(diff.mean(axis=1))
        draws_var.append(diff.var(axis=1) / diff.shape[1])
    gain = (gains[0] + gains[1]) / 2
    error = np.sqrt(((gains[0] - gains[1]) / 2) ** 2 + (draws_var[0] + draws_var[1]) / 4)
    return gain, error


def plug_in_cell(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    """The plug-in score's gains and standard errors in every run of one cell (the same seeds,
    splits and reports as :func:`cell`)."""
    rows = []
    for _, seed, stats in collections(problem, epsilon, reps):
        gain, error = plug_in_choice(stats.halves)
        row = {"problem": problem, "eps": epsilon, "seed": seed}
        for j, name in enumerate(ESTIMATORS[1:], start=1):
            row[f"plug-in gain {name}"], row[f"plug-in se {name}"] = float(gain[j]), float(error[j])
        rows.append(row)
    return pd.DataFrame(rows)


def load_or_run(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    """Every run of one cell, every score's columns: the first three scores' runs and the plug-in
    score's are kept apart (``plug-in/``), so adding it ran only it."""
    name = f"{problem}-{epsilon:g}.csv"
    runs = cached(RUNS / name, reps, partial(cell, problem, epsilon))
    plug_in = cached(RUNS / "plug-in" / name, reps, partial(plug_in_cell, problem, epsilon))
    return runs.merge(plug_in, on=["problem", "eps", "seed"], validate="one_to_one")


def picked(runs: pd.DataFrame, score: str, z: float) -> np.ndarray:
    """The estimator the rule (``score``, ``z``) picks in each run (names, shape ``(runs,)``), as
    :func:`aggregator.estimation.choice.pick` does."""
    from aggregator.estimation.choice import pick

    gains = np.column_stack([np.zeros(len(runs))] + [runs[f"{score} gain {n}"] for n in ESTIMATORS[1:]])
    errors = np.column_stack([np.zeros(len(runs))] + [runs[f"{score} se {n}"] for n in ESTIMATORS[1:]])
    return np.array([pick(g, e, ESTIMATORS, z) for g, e in zip(gains, errors)])


def auto_accuracy(runs: pd.DataFrame, score: str, z: float) -> np.ndarray:
    chosen = picked(runs, score, z)
    return np.choose(np.array([ESTIMATORS.index(c) for c in chosen]), [runs[n].to_numpy() for n in ESTIMATORS])


def best_rule(runs: pd.DataFrame, scores=OFFERED) -> tuple[str, float]:
    """The (score of ``scores``, Z) whose ``auto`` has the highest mean accuracy over ``runs``'
    cells; ties to the larger Z."""
    best, key = None, None
    for score in scores:
        for z in sorted(ZS, reverse=True):
            mean = float(auto_accuracy(runs, score, z).mean())
            if key is None or mean > key + 1e-12:
                best, key = (score, z), mean
    return best


def paired(x: pd.DataFrame, a: str, b: str) -> tuple[float, float]:
    """The mean paired gain of column ``a`` over ``b`` in one cell and its standard error."""
    d = x[a] - x[b]
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def held_out_rules(runs: pd.DataFrame, scores) -> tuple[pd.DataFrame, list[str]]:
    """Every run with ``auto``'s accuracy and pick under the rule (score of ``scores``, Z) chosen
    on the other thirteen problems, and that choice's table lines per held-out problem."""
    held = []
    lines = ["| held out | score, Z chosen on the other thirteen | auto − normsub | auto − paper |", "|---|---|---|---|"]
    for problem in runs["problem"].unique():
        score, z = best_rule(runs[runs["problem"] != problem], scores)
        x = runs[runs["problem"] == problem].copy()
        x["auto"] = auto_accuracy(x, score, z)
        x["auto pick"] = picked(x, score, z)
        held.append(x)
        lines.append(
            f"| {problem} | {score}, {z:g} | {(x['auto'] - x['normsub']).mean():+.4f} | {(x['auto'] - x['paper']).mean():+.4f} |"
        )
    return pd.concat(held), lines


def cell_lines(held: pd.DataFrame) -> list[str]:
    """The per-cell table of ``held`` (:func:`held_out_rules`), the count of cells where auto is
    below the better of normsub and paper by more than 2 SE, and the mean gains."""
    lines = [
        "| problem | ε | people | best constant | normsub | paper | ibu | auto | auto − normsub | auto − paper | auto − better | picks n/p/i |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    below = 0
    for (problem, eps), x in held.groupby(["problem", "eps"], sort=False):
        better = "normsub" if x["normsub"].mean() >= x["paper"].mean() else "paper"
        gn, gp, gb = paired(x, "auto", "normsub"), paired(x, "auto", "paper"), paired(x, "auto", better)
        flag = gb[0] < -2 * gb[1]
        below += flag
        shown = f"**{gb[0]:+.3f} ± {gb[1]:.3f}**" if flag else f"{gb[0]:+.3f} ± {gb[1]:.3f}"
        picks = "/".join(str(int((x["auto pick"] == n).sum())) for n in ESTIMATORS)
        means = " | ".join(f"{x[c].mean():.3f}" for c in ("best constant", "normsub", "paper", "ibu", "auto"))
        lines.append(
            f"| {problem} | {eps:g} | {int(x['people'].iloc[0]):,} | {means} | {gn[0]:+.3f} ± {gn[1]:.3f} | "
            f"{gp[0]:+.3f} ± {gp[1]:.3f} | {shown} | {picks} |"
        )
    small, large = held[held["people"] < LARGE], held[held["people"] >= LARGE]
    return lines + [
        "",
        f"Cells where auto is below the better of the two by more than 2 SE: **{below}** of {held.groupby(['problem', 'eps']).ngroups}.",
        "",
        "Mean over cells of auto − normsub / auto − paper: all "
        f"{(held['auto'] - held['normsub']).mean():+.4f} / {(held['auto'] - held['paper']).mean():+.4f}; "
        f"under {LARGE:,} people {(small['auto'] - small['normsub']).mean():+.4f} / {(small['auto'] - small['paper']).mean():+.4f}; "
        f"{LARGE:,} or more {(large['auto'] - large['normsub']).mean():+.4f} / {(large['auto'] - large['paper']).mean():+.4f}.",
    ]


def report(runs: pd.DataFrame) -> str:
    reps = int(runs["seed"].max() + 1)
    held, lines_loo = held_out_rules(runs, OFFERED)
    score_all, z_all = best_rule(runs, OFFERED)
    tried, tried_loo = held_out_rules(runs, SCORES)
    tried_all = best_rule(runs, SCORES)
    lines = [
        f"# The estimator a collection needs (`python research/estimator_choice.py --reps {reps}`)",
        "",
        f"Protocol auto, one report per person, exact fast mode drawn as two halves; accuracy on the held-out 20 %, "
        f"means over {reps} paired runs per cell (seeds 0–{reps - 1}; every estimator on the same reports). "
        f"*auto*: the rule with its score (of {', '.join(OFFERED)}: those `auto` offers) and Z chosen leaving the "
        "problem's data set out (next section). "
        "*better*: the better of normsub and paper in the cell (by their means); *auto − better* ± its standard error "
        "over the runs; **bold** where auto is below the better by more than 2 SE. *picks*: how often auto took "
        "normsub / paper / ibu.",
        "",
        *cell_lines(held),
        "",
        "## Chosen leave one data set out",
        "",
        f"The score and Z (of {', '.join(f'{z:g}' for z in ZS)}) whose auto scores best on average over the other "
        "thirteen problems' cells (ties: the larger Z), scored on the held-out problem (mean over its cells).",
        "",
        *lines_loo,
        "",
        f"On all fourteen: **{score_all}, Z = {z_all:g}**.",
        "",
        "## With the plug-in score among the candidates (tried, not offered)",
        "",
        "The same, the score chosen leaving one data set out among all four (the plug-in score: each candidate's "
        "accuracy on the conditionally independent population the other half estimates).",
        "",
        *cell_lines(tried),
        "",
        *tried_loo,
        "",
        f"On all fourteen: **{tried_all[0]}, Z = {tried_all[1]:g}**.",
        "",
        "## Every rule on all fourteen (in sample: for reading, not for choosing)",
        "",
        "| score | Z | mean auto − normsub | mean auto − paper | cells below the better by > 2 SE |",
        "|---|---|---|---|---|",
    ]
    for score in SCORES:
        for z in ZS:
            x = runs.assign(auto=auto_accuracy(runs, score, z))
            worse = 0
            for _, c in x.groupby(["problem", "eps"]):
                better = "normsub" if c["normsub"].mean() >= c["paper"].mean() else "paper"
                g = paired(c, "auto", better)
                worse += g[0] < -2 * g[1]
            lines.append(
                f"| {score} | {z:g} | {(x['auto'] - x['normsub']).mean():+.4f} | {(x['auto'] - x['paper']).mean():+.4f} | {worse} |"
            )
    lines += [
        "",
        "## Where paper classifies better, what the held-out score says",
        "",
        "Cells where paper's accuracy beats normsub's by more than one standard error; per score, the mean over the runs "
        "of paper's score gain over normsub in its own standard errors (the rule's z), and the largest.",
        "",
        "| problem | ε | paper − normsub | best constant − paper | " + " | ".join(f"{s} z mean (max)" for s in SCORES) + " |",
        "|---|---|---|---|" + "---|" * len(SCORES),
    ]
    for (problem, eps), x in runs.groupby(["problem", "eps"], sort=False):
        gain = paired(x, "paper", "normsub")
        if gain[0] > gain[1]:
            zs = []
            for score in SCORES:
                z = x[f"{score} gain paper"] / x[f"{score} se paper"].replace(0, np.nan)
                zs.append(f"{z.mean():+.2f} ({z.max():+.2f})")
            lines.append(
                f"| {problem} | {eps:g} | {gain[0]:+.3f} ± {gain[1]:.3f} | {(x['best constant'] - x['paper']).mean():+.3f} | "
                + " | ".join(zs) + " |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    cells = [(p, float(e)) for p in args.problems.split(",") for e in args.eps.split(",")]
    run = partial(load_or_run, reps=args.reps)
    parts = Parallel(n_jobs=args.jobs)(delayed(run)(p, e) for p, e in cells)
    runs = pd.concat(parts, ignore_index=True)
    text = report(runs)
    TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
