"""How often "with about N people it would" fails on fresh collections, on the fourteen problems.

    python research/promises.py [--pilots 2] [--eps 0.5,1] [--pilot-cap 2000] [--check 20]
        [--problems car,...] [--shuffled] [--jobs 2]

Each problem of ``bench/problems.py`` (the paper's four categorical data sets and the corpus's
ten, read as categorical) is the population. For every ε and pilot ``p``:

1. *A pilot*: rows drawn with replacement from the data set, as many as it has (at most
   ``--pilot-cap``, to bound the cost of the largest; the sizes used are in the table), seeded
   ``[problem index, p]``. With ``--shuffled``, a second pilot whose labels are permuted, and a
   population whose labels are permuted the same way: nothing to learn, so every promise fails.
2. *The verdict* ``python -m sim`` gives the pilot (10 collections, seeds 0-9, fast mode, protocol
   ``auto``): when the model beats the constant, no promise is asked for.
3. *The promise*: :func:`sim.verdict.people_needed` on the pilot (seed 0: search seeds 0-9,
   confirmation seeds 10-29), and, beside it, the rule it replaced (the first of 4x, 16x, 64x,
   256x the training split whose 10 search collections gave mean gain > SE), computed from the
   same search collections.
4. *The check*, as the outside statistician made it: ``--check`` fresh collections of N people
   drawn from the population (pilot ``p``'s seeds from ``1000 + p · check``; :func:`~sim.experiment.run_grown` on the whole
   data set: the people from each split's training rows, scored on its test rows, which no person
   is drawn from); the promise fails when their mean paired gain over the constant is not above
   its standard error.

Promises made and failed, per rule, with a Clopper-Pearson 95 % interval for the failure share.
Writes research/results/promises.md (and the cells, one JSON per line, to promises.jsonl beside
it, appended as they finish).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the fourteen problems
from problems import PROBLEMS, load_problem

import sim.verdict as rule
from sim.datasets import Dataset
from sim.experiment import run_grown, run_once
from sim.verdict import PEOPLE_FACTORS, PEOPLE_REPS, verdict

RESULTS = Path(__file__).with_name("results") / "promises.md"
CELLS = RESULTS.with_suffix(".jsonl")
CHECK_SEED = 1000


class Counted:
    """:func:`sim.verdict.grown_gains` remembered by (people, seeds) for one pilot and ε, so that
    the rule it replaced reads the very search collections the new rule drew; counts the
    collections simulated."""

    def __init__(self):
        self.memo, self.simulated = {}, 0
        self.real = rule.grown_gains

    def __call__(self, data, people, protocol, epsilon, estimator, setup, seeds):
        key = (people, tuple(seeds))
        if key not in self.memo:
            self.simulated += len(key[1])
            self.memo[key] = self.real(data, people, protocol, epsilon, estimator, setup, seeds)
        return self.memo[key]


def old_rule(gains_at) -> int | None:
    """The rule issue 80 replaced: the first size whose 10 collections give mean gain > SE."""
    for people, gains in gains_at:
        if gains.mean() > gains.std(ddof=1) / np.sqrt(len(gains)):
            return people
    return None


def bootstrap(data: Dataset, rows: int, rng, labels=None) -> Dataset:
    index = rng.integers(len(data.y), size=rows)
    y = (data.y if labels is None else labels)[index]
    return Dataset(data.name, data.X[index], y, data.feature_names, data.label_name)


def check(population: Dataset, people: int, epsilon: float, reps: int, pilot: int) -> dict:
    """The statistician's check: ``reps`` fresh collections of ``people`` from the population, on
    seeds of this pilot's own (another pilot promising the same N is checked afresh)."""
    first = CHECK_SEED + pilot * reps
    runs = [run_grown(population, people, "auto", epsilon, first + r) for r in range(reps)]
    found = verdict([r.accuracy["normsub"] for r in runs], [r.majority_accuracy for r in runs], 0)
    return {"gain": found.gain, "se": found.se, "failed": not found.gain > found.se}


def cell(problem: str, epsilon: float, pilot: int, cap: int, reps: int, shuffled: bool) -> dict:
    started = time.monotonic()
    data = load_problem(problem)
    rng = np.random.default_rng([PROBLEMS.index(problem), pilot, int(shuffled)])
    labels = rng.permutation(data.y) if shuffled else None
    population = data if labels is None else Dataset(data.name, data.X, labels, data.feature_names, data.label_name)
    sample = bootstrap(data, min(len(data.y), cap), rng, labels)
    own = [run_once(sample, "auto", epsilon, r, ("normsub",), mode="fast") for r in range(PEOPLE_REPS)]
    found = verdict([r.accuracy["normsub"] for r in own], [r.majority_accuracy for r in own], 0)
    out = {"problem": problem, "eps": epsilon, "pilot": pilot, "shuffled": shuffled, "rows": len(sample.y),
           "population": len(data.y), "learned": found.learned, "new": None, "old": None}  # fmt: skip
    if not found.learned:
        counted = Counted()
        rule.grown_gains = counted
        try:
            out["new"] = rule.people_needed(sample, "auto", epsilon, "normsub")
            out["collections_new"] = counted.simulated
            search = range(PEOPLE_REPS)
            sizes = [int(len(sample.y) * 0.8 * f) for f in PEOPLE_FACTORS]
            out["old"] = old_rule((p, counted(sample, p, "auto", epsilon, "normsub", None, search)) for p in sizes)
        finally:
            rule.grown_gains = counted.real
        checks = {}
        for which in ("new", "old"):
            people = out[which]
            if people is not None and people not in checks:
                checks[people] = check(population, people, epsilon, reps, pilot)
            out[f"check_{which}"] = checks.get(people)
    out["seconds"] = time.monotonic() - started
    with CELLS.open("a") as f:
        f.write(json.dumps(out) + "\n")
    print(json.dumps(out), flush=True)
    return out


def share(failed: int, made: int) -> str:
    from scipy.stats import beta

    if made == 0:
        return "no promises"
    low = beta.ppf(0.025, failed, made - failed + 1) if failed else 0.0
    high = beta.ppf(0.975, failed + 1, made - failed) if failed < made else 1.0
    return f"{failed} of {made} ({failed / made:.1%}; 95 % CI {low:.1%} to {high:.1%})"


def report(cells: list[dict], args) -> list[str]:
    lines = [
        (
            f"# Promises on fresh collections (`python research/promises.py --pilots {args.pilots} --eps {args.eps} "
            f"--pilot-cap {args.pilot_cap} --check {args.check}{' --shuffled' if args.shuffled else ''}`)"
        ),
        "",
        (
            f"Problems: {', '.join(dict.fromkeys(c['problem'] for c in cells))}. Pilots per problem and ε: {args.pilots} "
            f"(seeded [problem index, pilot, shuffled]); verdict seeds 0-9; search seeds 0-9, confirmation seeds 10-29; "
            f"check: {args.check} fresh collections of N from the whole data set, pilot p's seeds {CHECK_SEED} + "
            f"{args.check}p onwards (both rules' promises on one pilot at the same N share one check)."
        ),
        "",
    ]
    for label, mine in (("labels as they are", [c for c in cells if not c["shuffled"]]),
                        ("labels shuffled (every promise fails)", [c for c in cells if c["shuffled"]])):  # fmt: skip
        if not mine:
            continue
        asked = [c for c in mine if not c["learned"]]
        lines += [f"## {label}", "", (f"{len(mine)} pilots; the model beat the constant on {len(mine) - len(asked)}; "
                  f"a number of people asked for on {len(asked)}."), ""]  # fmt: skip
        for which, name in (
            ("new", "rule of issue 80 (confirmed)"),
            ("old", "rule it replaced (first size with gain > SE)"),
        ):
            made = [c for c in asked if c[which] is not None]
            failed = sum(c[f"check_{which}"]["failed"] for c in made)
            lines.append(f"- {name}: promises failed {share(failed, len(made))}")
        old_cost = [
            10 * (1 + [int(c["rows"] * 0.8 * f) for f in PEOPLE_FACTORS].index(c["old"])) if c["old"] else 40
            for c in asked
        ]
        new_cost = [c["collections_new"] for c in asked]
        lines += ["", (f"Collections simulated per number asked for: the new rule {np.mean(new_cost):.1f} on average "
                  f"(at most {max(new_cost)}; the bound is 120), the old rule {np.mean(old_cost):.1f} (bound 40).")]  # fmt: skip
        lines += ["", "| problem | ε | pilot | rows | new rule N | check | old rule N | check | collections (new rule) | s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in sorted(asked, key=lambda c: (c["problem"], c["eps"], c["pilot"])):
            cells_ = []
            for which in ("new", "old"):
                n, k = c[which], c[f"check_{which}"]
                cells_ += (
                    ["none", ""]
                    if n is None
                    else [f"{n:,}", f"{k['gain']:+.4f} ± {k['se']:.4f}" + (" **failed**" if k["failed"] else "")]
                )
            lines.append(f"| {c['problem']} | {c['eps']:g} | {c['pilot']} | {c['rows']:,} | " + " | ".join(cells_)
                         + f" | {c['collections_new']} | {c['seconds']:.0f} |")  # fmt: skip
        lines.append("")
    learned = sorted({(c["problem"], c["eps"]) for c in cells if c["learned"] and not c["shuffled"]})
    lines.append(
        "Beat the constant on the pilot (no promise asked): "
        + (", ".join(f"{p} ε {e:g}" for p, e in learned) or "none")
        + "."
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=2)
    parser.add_argument("--eps", default="0.5,1")
    parser.add_argument("--pilot-cap", type=int, default=2000)
    parser.add_argument("--check", type=int, default=20)
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--shuffled", action="store_true", help="also pilots with shuffled labels (at the first ε)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--resume", action="store_true", help="keep the cells promises.jsonl holds")
    args = parser.parse_args()
    from joblib import Parallel, delayed

    done = [json.loads(line) for line in CELLS.read_text().splitlines()] if args.resume and CELLS.exists() else []
    if not args.resume:
        CELLS.unlink(missing_ok=True)
    have = {(c["problem"], c["eps"], c["pilot"], c["shuffled"]) for c in done}
    epsilons = [float(e) for e in args.eps.split(",")]
    todo = [(p, e, k, False) for p in args.problems.split(",") for e in epsilons for k in range(args.pilots)]
    if args.shuffled:
        todo += [(p, epsilons[0], 0, True) for p in args.problems.split(",")]
    todo = [t for t in todo if t not in have]
    cells = Parallel(n_jobs=args.jobs)(delayed(cell)(p, e, k, args.pilot_cap, args.check, s) for p, e, k, s in todo)
    RESULTS.write_text("\n".join(report(done + cells, args)) + "\n")


if __name__ == "__main__":
    main()
