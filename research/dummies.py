"""What the shuffler's dummy reports cost, and the default share of them.

    python research/dummies.py [--reps 20] [--central 0.5,1,2] [--problems car,adult,...]

A shuffled batch of ``n`` people's reports and ``M`` dummies gives two guarantees against the
aggregator alone (``protocols.shuffling.guarantees``): the bound for ``n + M`` reports when the
batch's others are people, and for ``M + 1`` (a person's report among the dummies alone) when the
aggregator wrote them all. Dummies cost accuracy: they are noise the statistics subtract in
expectation (``participant.dummies``). For every problem of ``bench/problems.py`` (the paper's four
categorical data sets and the corpus's ten; the whole training split is one batch), every central
ε and every ``M``, as a share of ``n`` and as a count, ``--reps`` paired runs (seeds 0, 1, …;
protocol ``auto``, exact fast mode, the default model; the people's reports of a seed are the same
draws whatever ``M``) of two arms:

- *people*: each person reports at the largest local ε whose shuffled reports meet ε when the
  batch's others are people (``n + M`` of them); the flooded ε it leaves is reported beside;
- *both*: the largest local ε that meets ε in both cases (the flooded one needs ``M ≥ 1``; with
  none, the local ε is ε itself).

The default share is chosen on the *both* arm (the guarantee that holds whatever the aggregator
does), leaving one data set out: for each problem, the share with the best mean paired gain over
the constant classifier on the other thirteen, scored on the one left out. Writes
``research/results/dummies.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from problems import grid, load_problem

from participant.spec import EPSILON_RANGE
from protocols.shuffling import default_delta, guarantees, local_epsilon_for
from sim.cli_options import training_people
from sim.experiment import runner_for

RESULTS = Path(__file__).with_name("results") / "dummies.md"
ESTIMATOR = "normsub"
SHARES = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
COUNTS = (100, 300, 1000, 3000)


def blankets(people: int) -> list[tuple[str, int]]:
    """The dummies tried for a batch of ``people``: ``(label, M)``, shares then counts."""
    return [(f"{s:g}n", int(np.ceil(s * people))) for s in SHARES] + [(f"{c}", c) for c in COUNTS]


def cell(problem: str, central: float, reps: int) -> list[dict]:
    """One problem at one central ε: per number of dummies and arm, the paired accuracies."""
    data = load_problem(problem)
    people = training_people(data)
    delta = default_delta(people)
    runner = runner_for(data)
    constant = np.array([runner.run("auto", central, seed, (ESTIMATOR,), mode="fast").majority_accuracy for seed in range(reps)])
    rows = []
    for label, dummies in blankets(people):
        for arm, flooded in (("people", None), ("both", central)):
            local = local_epsilon_for(central, people, dummies, delta, flooded, ceiling=EPSILON_RANGE[1])
            accuracy = np.array([
                runner.run("auto", local, seed, (ESTIMATOR,), mode="fast", dummies=dummies).accuracy[ESTIMATOR]
                for seed in range(reps)
            ])  # fmt: skip
            rows.append({
                "problem": problem, "people": people, "central": central, "label": label, "dummies": dummies,
                "arm": arm, "local": local, "flooded": guarantees(local, people, dummies, delta)["flooded"],
                "accuracy": accuracy, "gain": accuracy - constant,
            })  # fmt: skip
    return rows


def mean_se(values: np.ndarray) -> str:
    return f"{values.mean():.3f} ± {values.std(ddof=1) / np.sqrt(len(values)):.3f}"


def beats(gain: np.ndarray) -> bool:
    return gain.mean() > gain.std(ddof=1) / np.sqrt(len(gain))


def leave_one_out(rows: list[dict]) -> list[str]:
    """Lines on the default share chosen leaving one data set out, on the *both* arm."""
    shares = [f"{s:g}n" for s in SHARES]
    problems = sorted({r["problem"] for r in rows})
    gain = {(r["problem"], r["label"]): [] for r in rows if r["arm"] == "both"}
    for r in rows:
        if r["arm"] == "both":
            gain[(r["problem"], r["label"])].append(r["gain"].mean())
    mean = {key: float(np.mean(v)) for key, v in gain.items()}  # over the central ε
    held, chosen = [], []
    for out in problems:
        best = max(shares, key=lambda s: np.mean([mean[(p, s)] for p in problems if p != out]))
        chosen.append(best)
        held.append(mean[(out, best)])
    overall = {s: np.mean([mean[(p, s)] for p in problems]) for s in shares}
    lines = [
        "Mean paired gain over the constant, *both* arm, averaged over the central ε and the problems:",
        "",
        "| dummies | " + " | ".join(shares) + " |",
        "|---|" + "---|" * len(shares),
        "| gain | " + " | ".join(f"{overall[s]:+.4f}" for s in shares) + " |",
        "",
        f"Chosen leaving one data set out: {', '.join(f'{p} {c}' for p, c in zip(problems, chosen))}. "
        f"Scored on the data set left out: {np.mean(held):+.4f} (the best fixed share in hindsight, "
        f"{max(overall, key=overall.get)}: {max(overall.values()):+.4f}).",
    ]
    return lines


def main() -> None:
    args, centrals, problems, cells = grid(cell, __doc__.split("\n\n")[0])
    rows = [row for c in cells for row in c]
    counts = {}
    for r in rows:
        key = (r["arm"], r["label"])
        counts[key] = counts.get(key, 0) + beats(r["gain"])
    labels = [label for label, _ in blankets(1)]
    cells_per = len(problems) * len(centrals)
    lines = [
        f"# What dummies cost (`python research/dummies.py --reps {args.reps} --central {args.central}`)",
        "",
        f"Test accuracy over {args.reps} paired runs (fast mode, protocol auto, the default model), the whole "
        "training split one batch of n people's reports and M dummies, δ = 1/(10 n). *people*: the local ε meets the "
        "central ε when the batch's others are people; *flooded ε*: what that leaves against an aggregator that wrote "
        "every other report. *both*: the local ε meets the central ε in both cases. *Beats*: the paired gain over the "
        "constant classifier exceeds one standard error.",
        "",
        "<!-- --8<-- [start:summary] -->",
        f"Cells (of {cells_per}: fourteen problems, central ε {args.central}) that beat the constant, by dummies:",
        "",
        "| arm | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
        *(f"| {arm} | " + " | ".join(str(counts[(arm, label)]) for label in labels) + " |" for arm in ("people", "both")),
        "",
        *leave_one_out(rows),
        "<!-- --8<-- [end:summary] -->",
        "",
        "| problem | n | central ε | M | people: local ε | flooded ε | accuracy | beats | both: local ε | accuracy | beats "
        "| constant |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(r["problem"], r["central"], r["label"], r["arm"]): r for r in rows}
    for problem in problems:
        for central in centrals:
            for label, _ in blankets(by_key[(problem, central, "0n", "people")]["people"]):
                p, b = by_key[(problem, central, label, "people")], by_key[(problem, central, label, "both")]
                lines.append(
                    f"| {problem} | {p['people']:,} | {central:g} | {label} ({p['dummies']:,}) | {p['local']:.2f} | "
                    f"{p['flooded']:.2f} | {mean_se(p['accuracy'])} | {'yes' if beats(p['gain']) else 'no'} | "
                    f"{b['local']:.2f} | {mean_se(b['accuracy'])} | {'yes' if beats(b['gain']) else 'no'} | "
                    f"{(p['accuracy'] - p['gain']).mean():.3f} |"
                )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index("<!-- --8<-- [end:summary] -->")]))


if __name__ == "__main__":
    main()
