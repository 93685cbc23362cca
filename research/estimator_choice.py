"""The estimator a collection needs, chosen from its reports: ``auto`` against ``normsub`` (the
default) and ``paper`` on the fourteen problems, its one constant chosen leaving one data set out.

    python research/estimator_choice.py [--reps 20] [--eps 0.5,1,2,4] [--problems car,adult,...] [--jobs 1]

For every problem of ``bench/problems.py`` and every ε, ``--reps`` paired runs (seeds 0, 1, …; a
random 80/20 split, every training row one person with one report, protocol ``auto``, exact fast
mode drawn as two halves by a fair coin per person, :meth:`sim.experiment.Runner.statistics` with
``halves``): on the same reports, the test accuracy of ``normsub``, ``paper`` and ``ibu``, and for
each held-out score of :mod:`aggregator.estimation.choice` (``joint``, ``conditional``, ``accuracy``) each
candidate's score gain over the default and its standard error. The rule's pick at any ``Z`` is
then read off those, so every rule is scored on the very runs the estimators are.

The rule's constants (the score, and ``Z`` of :data:`ZS`) are chosen leaving one data set out: for
each problem, the pair whose ``auto`` has the highest mean accuracy over the other thirteen
problems' cells (ties: the larger ``Z``, the one that leaves the default more often), scored on the
held-out problem. Runs are kept per cell in ``research/results/estimator_choice/`` (a cell already
there is not run again); the tables go to ``research/results/estimator_choice.md``.
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

RESULTS = Path(__file__).with_name("results")
RUNS = RESULTS / "estimator_choice"
TABLE = RESULTS / "estimator_choice.md"
ESTIMATORS = ("normsub", "paper", "ibu")
SCORES = ("joint", "conditional", "accuracy")
ZS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
LARGE = 1000


def cell(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    """Every run of one (problem, ε) cell, one row each."""
    warnings.simplefilter("ignore")
    from aggregator.estimation.estimators import build_model, estimator_choice
    from sim.experiment import runner_for

    runner = runner_for(load_problem(problem))
    setting = ("auto", epsilon, None, "one-report")
    rows = []
    for seed in range(reps):
        stats = runner.statistics(setting, seed, mode="fast", halves=True)
        models = [build_model(stats, name, temperature=1.0) for name in ESTIMATORS]
        accuracy, _ = runner._score(models, seed, log_loss=False)
        _, test, _ = runner.split(seed)
        counts = np.bincount(runner.labels[test], minlength=runner.k)
        row = {"problem": problem, "eps": epsilon, "seed": seed, "people": stats.n_reports,
               "best constant": float(counts.max() / counts.sum()),
               **{name: float(a) for name, a in zip(ESTIMATORS, accuracy)}}  # fmt: skip
        for score in SCORES:
            choice = estimator_choice(stats.halves, ESTIMATORS, score)
            for name in ESTIMATORS[1:]:
                row[f"{score} gain {name}"] = choice.gains[name]
                row[f"{score} se {name}"] = choice.errors[name]
        rows.append(row)
    return pd.DataFrame(rows)


def load_or_run(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    path = RUNS / f"{problem}-{epsilon:g}.csv"
    if path.is_file():
        runs = pd.read_csv(path)
        if len(runs) >= reps:
            return runs.iloc[:reps]
    runs = cell(problem, epsilon, reps)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(path, index=False)
    return runs


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


def best_rule(runs: pd.DataFrame) -> tuple[str, float]:
    """The (score, Z) whose ``auto`` has the highest mean accuracy over ``runs``' cells; ties to the larger Z."""
    best, key = None, None
    for score in SCORES:
        for z in sorted(ZS, reverse=True):
            mean = float(auto_accuracy(runs, score, z).mean())
            if key is None or mean > key + 1e-12:
                best, key = (score, z), mean
    return best


def paired(x: pd.DataFrame, a: str, b: str) -> tuple[float, float]:
    """The mean paired gain of column ``a`` over ``b`` in one cell and its standard error."""
    d = x[a] - x[b]
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def report(runs: pd.DataFrame) -> str:
    reps = int(runs["seed"].max() + 1)
    held = []
    lines_loo = ["| held out | score, Z chosen on the other thirteen | auto − normsub | auto − paper |", "|---|---|---|---|"]
    for problem in runs["problem"].unique():
        score, z = best_rule(runs[runs["problem"] != problem])
        x = runs[runs["problem"] == problem].copy()
        x["auto"] = auto_accuracy(x, score, z)
        x["auto pick"] = picked(x, score, z)
        x["rule"] = f"{score}, {z:g}"
        held.append(x)
        lines_loo.append(
            f"| {problem} | {score}, {z:g} | {(x['auto'] - x['normsub']).mean():+.4f} | {(x['auto'] - x['paper']).mean():+.4f} |"
        )
    held = pd.concat(held)
    score_all, z_all = best_rule(runs)
    lines = [
        f"# The estimator a collection needs (`python research/estimator_choice.py --reps {reps}`)",
        "",
        f"Protocol auto, one report per person, exact fast mode drawn as two halves; accuracy on the held-out 20 %, "
        f"means over {reps} paired runs per cell (seeds 0–{reps - 1}; every estimator on the same reports). "
        "*auto*: the rule with its score and Z chosen leaving the problem's data set out (last table). "
        "*better*: the better of normsub and paper in the cell (by their means); *auto − better* ± its standard error "
        "over the runs; **bold** where auto is below the better by more than 2 SE. *picks*: how often auto took "
        "normsub / paper / ibu.",
        "",
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
    lines += [
        "",
        f"Cells where auto is below the better of the two by more than 2 SE: **{below}** of {held.groupby(['problem', 'eps']).ngroups}.",
        "",
        "Mean over cells of auto − normsub / auto − paper: all "
        f"{(held['auto'] - held['normsub']).mean():+.4f} / {(held['auto'] - held['paper']).mean():+.4f}; "
        f"under {LARGE:,} people {(small['auto'] - small['normsub']).mean():+.4f} / {(small['auto'] - small['paper']).mean():+.4f}; "
        f"{LARGE:,} or more {(large['auto'] - large['normsub']).mean():+.4f} / {(large['auto'] - large['paper']).mean():+.4f}.",
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
