"""What shuffling buys: the model a central ε affords with local reports, and with shuffled ones.

    python bench/shuffling.py [--reps 20] [--central 0.5,1,2] [--problems car,adult,...]

For every problem of ``bench/problems.py`` (the paper's four categorical data sets and the corpus's
ten) and every central ε: ``--reps`` paired runs (seeds 0, 1, …; a random 80/20 split, every
training row one person with one report, protocol ``auto``, exact fast mode, the default model):

- *local*: each person reports at ε itself, the guarantee against the aggregator with no shuffler;
- *shuffled*: each person reports at the largest local ε whose reports, shuffled together (the
  whole training split, ``n`` people), are (ε, δ)-DP against the aggregator alone, δ = 1/(10 n)
  (``protocols.shuffling``);

beside the constant classifier (the training split's majority class, on the same test rows).
Writes ``bench/results/shuffling.md``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from problems import grid, load_problem

from protocols.shuffling import default_delta, largest_local_epsilon
from sim.cli_options import training_people
from sim.experiment import runner_for

RESULTS = Path(__file__).with_name("results") / "shuffling.md"
ESTIMATOR = "normsub"


def cell(problem: str, central: float, reps: int) -> dict:
    """One problem at one central ε: paired accuracies of the local and shuffled arms, and the constant's."""
    data = load_problem(problem)
    people = training_people(data)
    delta = default_delta(people)
    local = min(largest_local_epsilon(central, people, delta), 50.0)
    runner = runner_for(data)
    arms = {"local": [], "shuffled": [], "constant": []}
    for seed in range(reps):
        direct = runner.run("auto", central, seed, (ESTIMATOR,), mode="fast", log_loss=False)
        shuffled = runner.run("auto", local, seed, (ESTIMATOR,), mode="fast", log_loss=False)
        arms["local"].append(direct.accuracy[ESTIMATOR])
        arms["shuffled"].append(shuffled.accuracy[ESTIMATOR])
        arms["constant"].append(direct.majority_accuracy)
    return {"problem": problem, "people": people, "central": central, "delta": delta, "local_epsilon": local,
            **{arm: np.array(values) for arm, values in arms.items()}}  # fmt: skip


def mean_se(values: np.ndarray) -> str:
    return f"{values.mean():.3f} ± {values.std(ddof=1) / np.sqrt(len(values)):.3f}"


def main() -> None:
    args, centrals, problems, cells = grid(cell, __doc__.split("\n\n")[0])
    lines = [
        f"# What shuffling buys (`python bench/shuffling.py --reps {args.reps} --central {args.central}`)",
        "",
        f"Mean test accuracy ± standard error over {args.reps} paired runs (fast mode, protocol auto, the default "
        "model). *Local*: each person reports at the central ε itself. *Shuffled*: each reports at the local ε "
        "whose reports, shuffled together, are (ε, δ = 1/(10 n))-DP against the aggregator alone. "
        "*Beats constant*: the paired gain over the constant classifier exceeds one standard error.",
        "",
        "| problem | people | central ε | local: accuracy | beats constant | shuffled: local ε | shuffled: accuracy "
        "| beats constant | constant |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    beats = {"local": 0, "shuffled": 0}
    for c in cells:
        row = []
        for arm in ("local", "shuffled"):
            gain = c[arm] - c["constant"]
            ok = gain.mean() > gain.std(ddof=1) / np.sqrt(len(gain))
            beats[arm] += ok
            row.append((mean_se(c[arm]), "yes" if ok else "no"))
        lines.append(
            f"| {c['problem']} | {c['people']:,} | {c['central']:g} | {row[0][0]} | {row[0][1]} | {c['local_epsilon']:.2f} "
            f"| {row[1][0]} | {row[1][1]} | {c['constant'].mean():.3f} |"
        )
        print(lines[-1], flush=True)
    gains = np.array([(c["shuffled"] - c["local"]).mean() for c in cells])
    lines += [
        "",
        f"Cells that beat the constant classifier: local {beats['local']} of {len(cells)}, shuffled "
        f"{beats['shuffled']} of {len(cells)}. Shuffled minus local, mean over cells: {gains.mean():+.3f} "
        f"(smallest {gains.min():+.3f}, largest {gains.max():+.3f}).",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))


if __name__ == "__main__":
    main()
