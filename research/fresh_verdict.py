"""The verdict and the people-needed figure, checked on fresh data from known generators.

    python research/fresh_verdict.py [--files 60] [--claims 20] [--generators 3] [--fresh-reps 10]

A claim about a population is checked against data drawn fresh from the population, not
resampled from the file the claim was made on. Two generators of categorical files:

- **No signal**: 5 features of 4 equally likely values, the class independent of them (balanced,
  or 0.7 / 0.3). For each size (100, 500, 3,000 rows) and ε (1, 4), ``--files`` files, each
  judged as ``python -m sim`` judges it (10 seeded splits, fast mode, protocol ``auto``): how
  often the model is said to beat the best constant classifier on the test rows, at the shipped
  threshold (one standard error of the paired gain) and at two. A verdict that holds passes none
  but by chance. Then, on ``--claims`` files of 500 rows at ε = 1, how often the people-needed
  search names a number (no number of people helps there).
- **A known Naive Bayes model**: ``--generators`` models (2 balanced classes, 6 features of 3
  values, each class's distributions Dirichlet(2)), a pilot of 300 rows from each, at ε 0.5 and 1:
  the people the search claims from the pilot, then fresh collections of half, once and twice that
  many people from the model itself (``--fresh-reps`` each): their gain over the constant.

Writes research/results/fresh_verdict.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from sim.datasets import Dataset
from sim.experiment import TEST_SIZE, run_once, test_rows
from sim.verdict import PEOPLE_REPS, people_needed, verdict

RESULTS = Path(__file__).with_name("results") / "fresh_verdict.md"
PRIORS = {"balanced": (0.5, 0.5), "0.7 / 0.3": (0.7, 0.3)}


def no_signal(rows: int, prior, rng) -> Dataset:
    X = np.array([[f"v{v}" for v in row] for row in rng.integers(4, size=(rows, 5))], dtype=object)
    y = rng.choice(np.array(["a", "b"], dtype=object), rows, p=prior)
    return Dataset("no-signal", X, y, tuple(f"f{i}" for i in range(5)), "class")


class NaiveBayesModel:
    """Two balanced classes, 6 features of 3 values, each class's distributions Dirichlet(2)."""

    def __init__(self, seed: int):
        self.conditionals = np.random.default_rng(seed).dirichlet(np.full(3, 2.0), size=(2, 6))

    def draw(self, rows: int, rng) -> Dataset:
        y = rng.integers(2, size=rows)
        X = np.empty((rows, 6), dtype=object)
        values = np.array(["v0", "v1", "v2"], dtype=object)
        for f in range(6):
            for c in range(2):
                mine = y == c
                X[mine, f] = values[rng.choice(3, mine.sum(), p=self.conditionals[c, f])]
        return Dataset("naive-bayes", X, np.array(["a", "b"], dtype=object)[y], tuple(f"f{i}" for i in range(6)), "class")


def judged(data: Dataset, epsilon: float, reps: int = PEOPLE_REPS, seed: int = 0):
    """The verdict ``python -m sim`` gives ``data`` (fast mode): a :class:`~sim.verdict.Verdict`."""
    runs = [run_once(data, "auto", epsilon, seed + r, ("normsub",), mode="fast") for r in range(reps)]
    return verdict([r.accuracy["normsub"] for r in runs], [r.majority_accuracy for r in runs], test_rows(runs[0].n_train))


def rate(flags) -> str:
    flags = np.asarray(flags, dtype=bool)
    return f"{flags.sum()} of {len(flags)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=60, help="no-signal files per size, balance and ε")
    parser.add_argument("--claims", type=int, default=20, help="no-signal files of 500 rows searched for people, per balance")
    parser.add_argument("--generators", type=int, default=3, help="known Naive Bayes models")
    parser.add_argument("--fresh-reps", type=int, default=10, help="fresh collections per size checked")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    lines = [
        f"# The verdict on fresh data (`python research/fresh_verdict.py --files {args.files} --claims {args.claims} "
        f"--generators {args.generators} --fresh-reps {args.fresh_reps}`)",
        "",
        "## Files whose class is independent of every feature",
        "",
        "Each file judged as `python -m sim` judges it (10 splits, fast mode, protocol `auto`): how many are said to "
        "beat the best constant classifier on their test rows.",
        "",
        "| rows | class balance | ε | beat at 1 SE (shipped) | beat at 2 SE |",
        "|---|---|---|---|---|",
    ]
    for rows in (100, 500, 3000):
        for balance, prior in PRIORS.items():
            for epsilon in (1.0, 4.0):
                found = [judged(no_signal(rows, prior, np.random.default_rng([rows, f])), epsilon) for f in range(args.files)]
                z = np.array([v.gain / v.se if v.se > 0 else -np.inf for v in found])
                lines.append(f"| {rows:,} | {balance} | {epsilon:g} | {rate(z > 1)} | {rate(z > 2)} |")
                print(lines[-1], flush=True)
    lines += ["", "People-needed search on no-signal files of 500 rows at ε = 1:", ""]
    for balance, prior in PRIORS.items():
        claims = [people_needed(no_signal(500, prior, np.random.default_rng([7, f])), "auto", 1.0, "normsub") for f in range(args.claims)]
        named = [c for c in claims if c is not None]
        lines.append(f"- {balance}: a number of people named for {rate([c is not None for c in claims])} files" + (f" ({', '.join(f'{c:,}' for c in named)})" if named else ""))
        print(lines[-1], flush=True)

    lines += [
        "",
        "## Pilots of 300 rows from a known Naive Bayes model",
        "",
        f"The people the search claims from the pilot, and fresh collections from the model itself of half, once and twice "
        f"as many people ({args.fresh_reps} each, each person one report, scored on test rows as many as a fifth of the "
        "collection's rows): their gain over the best constant classifier, ± its standard error.",
        "",
        "| model | ε | claimed people | fresh, half | fresh, claimed | fresh, twice |",
        "|---|---|---|---|---|---|",
    ]
    for g in range(args.generators):
        model = NaiveBayesModel(100 + g)
        for epsilon in (0.5, 1.0):
            pilot = model.draw(300, np.random.default_rng([g, 300]))
            claimed = people_needed(pilot, "auto", epsilon, "normsub")
            cells = []
            for factor in (0.5, 1, 2):
                if claimed is None:
                    cells.append("")
                    continue
                people = int(claimed * factor)
                fresh = [model.draw(int(np.ceil(people / (1 - TEST_SIZE))), np.random.default_rng([g, people, r])) for r in range(args.fresh_reps)]
                runs = [run_once(d, "auto", epsilon, r, ("normsub",), mode="fast") for r, d in enumerate(fresh)]
                found = verdict([r.accuracy["normsub"] for r in runs], [r.majority_accuracy for r in runs], test_rows(people))
                cells.append(f"{people:,}: {found.gain:+.3f} ± {found.se:.3f}")
            lines.append(f"| {g} | {epsilon:g} | {'none' if claimed is None else f'{claimed:,}'} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
