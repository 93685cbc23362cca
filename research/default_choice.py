"""Which default model earns its machinery: four candidates on the fourteen problems, chosen leave
one data set out.

    python research/default_choice.py [--reps 40] [--eps 0.5,1,2,4] [--problems car,adult,...] [--jobs 2]

For every problem of ``bench/problems.py`` and every ε, ``--reps`` paired runs (seeds 0, 1, …; a
random 80/20 split, every training row one person with one report, protocol ``auto``, exact fast
mode). On each run's reports, the test accuracy of:

- ``strength 1``: ``normsub`` smoothed at the empirical-Bayes weight, no bootstrap;
- ``fallback``: ``strength 1``, or the class the reports name most common (the constant classifier
  the reports give) where the dependence test finds no feature depending on the class at 5 %
  (:func:`aggregator.estimation.dependence.dependence_p_value`);
- ``rule``: the bootstrap's pick of one strength (``research/strength_rule.py``, which the aggregator ran before);
- ``averaged``: the models at every strength, their class probabilities averaged with weights the
  share of the bootstrap's draws in which each strength scored best;

beside ``paper``, ``prior only`` (the reports' most common class), the training split's majority
class and the best constant on the test rows (the most common class among them, read with their
labels: a bound, not a classifier). Candidates are ordered by what they add, simplest first; for
each held-out problem the default is the simplest candidate that no other beats by more than one
standard error of the mean paired gain over the other thirteen problems' cells, and it is scored on
the held-out problem. Runs are kept per cell in ``research/results/default_choice/`` (a cell already
there is not run again); the tables go to ``research/results/default_choice.md``.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from problems import PROBLEMS, load_problem
from tqdm import tqdm

from paired_runs import cached

RESULTS = Path(__file__).with_name("results")
RUNS = RESULTS / "default_choice"
TABLE = RESULTS / "default_choice.md"
CANDIDATES = ("strength 1", "fallback", "rule", "averaged")  # simplest first
LEVEL = 0.05
LARGE = 1000


def cell(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    """Every run of one (problem, ε) cell, one row each."""
    warnings.simplefilter("ignore")
    from scipy.special import softmax
    from strength_rule import WORLD, bootstrap_accuracies, choose_strength

    from aggregator.estimation.bootstrap import bootstrap_too_large
    from aggregator.estimation.dependence import dependence_p_value
    from aggregator.estimation.estimators import normsub_unsmoothed, paper_estimator
    from aggregator.estimation.smoothing import REFERENCE, STRENGTHS
    from sim.experiment import runner_for

    runner = runner_for(load_problem(problem))
    setting = ("auto", epsilon, None, "one-report")
    rows = []
    for seed in range(reps):
        stats = runner.statistics(setting, seed, mode="fast")
        spec = stats.spec
        base = normsub_unsmoothed(stats)
        train, test, _ = runner.split(seed)
        codes, labels = runner.codes[test], runner.labels[test]
        by_strength = [base.model(spec, s, 1.0) for s in STRENGTHS]
        jll = np.stack([m.joint_log_likelihood_codes(codes) for m in by_strength])  # (S, m, k)
        if bootstrap_too_large(spec):
            weights = np.eye(len(STRENGTHS))[STRENGTHS.index(REFERENCE)]
        else:
            scores = bootstrap_accuracies(stats, normsub_unsmoothed, base, STRENGTHS, world=WORLD)  # (draws, S)
            best = scores == scores.max(axis=1, keepdims=True)
            weights = (best / best.sum(axis=1, keepdims=True)).mean(axis=0)
        averaged = np.tensordot(weights, softmax(jll, axis=2), axes=1).argmax(axis=1)
        chosen = choose_strength(stats, normsub_unsmoothed, base)
        prior = np.argmax(base.class_count)
        p_value = dependence_p_value(stats, base.class_count)
        s1 = jll[STRENGTHS.index(REFERENCE)].argmax(axis=1)
        test_counts = np.bincount(labels, minlength=runner.k)
        row = {
            "problem": problem, "eps": epsilon, "seed": seed, "people": stats.n_reports,
            "majority": float(np.mean(labels == np.argmax(np.bincount(runner.labels[train], minlength=runner.k)))),
            "best constant": float(test_counts.max() / test_counts.sum()),
            "prior only": float(np.mean(labels == prior)),
            "paper": float(np.mean(paper_estimator(stats, 1.0).joint_log_likelihood_codes(codes).argmax(axis=1) == labels)),
            "strength 1": float(np.mean(s1 == labels)),
            "fallback": float(np.mean((s1 if p_value <= LEVEL else np.full_like(s1, prior)) == labels)),
            "rule": float(np.mean(jll[STRENGTHS.index(chosen)].argmax(axis=1) == labels)),
            "averaged": float(np.mean(averaged == labels)),
            "p value": p_value, "rule strength": chosen,
        }  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def load_or_run(problem: str, epsilon: float, reps: int) -> pd.DataFrame:
    return cached(RUNS / f"{problem}-{epsilon:g}.csv", reps, partial(cell, problem, epsilon))


def paired(runs: pd.DataFrame, a: str, b: str) -> tuple[float, float]:
    """The mean over cells of ``a``'s mean paired gain over ``b``, and its standard error (cells
    independent, each cell's error from its runs)."""
    cells = runs.assign(d=runs[a] - runs[b]).groupby(["problem", "eps"])["d"]
    means, errors = cells.mean(), cells.std(ddof=1) / np.sqrt(cells.count())
    return float(means.mean()), float(np.sqrt((errors**2).sum()) / len(means))


def simplest_unbeaten(runs: pd.DataFrame) -> str:
    """The first of :data:`CANDIDATES` that no other beats by more than one standard error."""
    for candidate in CANDIDATES:
        gains = (paired(runs, other, candidate) for other in CANDIDATES if other != candidate)
        if all(mean <= error for mean, error in gains):
            return candidate
    return CANDIDATES[0]


def report(runs: pd.DataFrame) -> str:
    lines = [
        f"# Which default model pays (`python research/default_choice.py --reps {runs['seed'].max() + 1}`)",
        "",
        "Protocol auto, one report per person, exact fast mode; accuracy on the held-out 20 %, means over "
        f"{runs['seed'].max() + 1} paired runs per cell. *Best constant*: the most common class of the test rows "
        "themselves (a bound read with their labels). *Fallback*: strength 1, or the reports' most common class "
        f"where no feature's dependence on the class is significant at {LEVEL:g}.",
        "",
        "## Per cell",
        "",
        "| problem | ε | people | best constant | prior only | paper | strength 1 | fallback | rule | averaged | fallback taken |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (problem, eps), x in runs.groupby(["problem", "eps"], sort=False):
        taken = float(np.mean(x["p value"] > LEVEL))
        values = " | ".join(f"{x[c].mean():.3f}" for c in ("best constant", "prior only", "paper", *CANDIDATES))
        lines.append(f"| {problem} | {eps:g} | {int(x['people'].iloc[0]):,} | {values} | {taken:.0%} |")
    lines += ["", "## Mean paired gain over every cell (row minus column, ± standard error)", ""]
    lines += ["| | " + " | ".join(CANDIDATES) + " |", "|---" * (len(CANDIDATES) + 1) + "|"]
    for a in CANDIDATES:
        cells = [("" if a == b else "{:+.4f} ± {:.4f}".format(*paired(runs, a, b))) for b in CANDIDATES]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    small = runs[runs["people"] < LARGE]
    large = runs[runs["people"] >= LARGE]
    lines += ["", "On problems under 1,000 people / 1,000 or more: " + "; ".join(
        f"{c} − strength 1 {paired(small, c, 'strength 1')[0]:+.4f} / {paired(large, c, 'strength 1')[0]:+.4f}"
        for c in CANDIDATES[1:]) + "."]  # fmt: skip
    lines += ["", "## Chosen leave one data set out", "",
              "The simplest candidate no other beats by more than one standard error on the other thirteen problems, scored on the held-out one.", "",
              "| held out | chosen on the others | its accuracy − strength 1 | − best constant |", "|---|---|---|---|"]  # fmt: skip
    chosen_runs = []
    for problem in runs["problem"].unique():
        choice = simplest_unbeaten(runs[runs["problem"] != problem])
        held = runs[runs["problem"] == problem]
        chosen_runs.append(held.assign(chosen=held[choice]))
        gain = paired(held.assign(chosen=held[choice]), "chosen", "strength 1")
        versus = paired(held.assign(chosen=held[choice]), "chosen", "best constant")
        lines.append(f"| {problem} | {choice} | {gain[0]:+.4f} ± {gain[1]:.4f} | {versus[0]:+.4f} |")
    lines += ["", f"On all fourteen: **{simplest_unbeaten(runs)}**."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    cells = [(p, float(e)) for p in args.problems.split(",") for e in args.eps.split(",")]
    run = partial(load_or_run, reps=args.reps)
    parts = Parallel(n_jobs=args.jobs)(delayed(run)(p, e) for p, e in tqdm(cells, desc="cells"))
    runs = pd.concat(parts, ignore_index=True)
    text = report(runs)
    TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
