"""What the default dummies cost, drawn uniformly (before) and from the fixed composition (now).

    python research/dummy_composition.py [--reps 8] [--central 2] [--problems car,adult,...] [--jobs 1]

For every problem of ``bench/problems.py`` (the whole training split one batch of ``n`` people)
and every central ε, the default dummies ``M = ⌈DUMMY_SHARE·n⌉`` and the local ε that meets the
central ε both when the batch's others are people and when the aggregator wrote them all
(``protocols.shuffling.local_epsilon_for``, the *both* arm of ``research/dummies.py``). At that
local ε, ``--reps`` paired runs (seeds 0, 1, …; protocol ``auto``, fast mode, the default
estimator; the same people's reports in every arm of a seed, the dummies from the seed's own
stream) of three arms: no dummies, ``M`` dummies with uniform values
(``dummy_states(..., uniform=True)``), and ``M`` dummies from the fixed composition
(:mod:`participant.dummies`). The *cost* of an arm is the paired accuracy without dummies less the
arm's. Writes ``research/results/dummy_composition.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems
from problems import grid, load_problem

from aggregator import build_model
from participant.dummies import dummy_states
from participant.spec import EPSILON_RANGE
from protocols.shuffling import default_delta, default_dummies, local_epsilon_for
from sim.cli_options import training_people
from sim.experiment import DUMMY_STREAM, runner_for

RESULTS = Path(__file__).with_name("results") / "dummy_composition.md"
ESTIMATOR = "normsub"
ARMS = ("none", "uniform", "composed")


def cell(problem: str, central: float, reps: int) -> dict:
    """One problem at one central ε: per arm, the accuracy of each seed."""
    data = load_problem(problem)
    people = training_people(data)
    dummies = default_dummies(people)
    delta = default_delta(people)
    local = local_epsilon_for(central, people, dummies, delta, central, ceiling=EPSILON_RANGE[1])
    runner = runner_for(data)
    removable = _removable(runner.spec("auto", local, *_rest()), dummies)
    accuracy = {arm: [] for arm in ARMS}
    constant = []
    for seed in range(reps):
        stats = runner.statistics(("auto", local, *_rest()), seed, "fast")
        models = [build_model(stats, ESTIMATOR, 1.0)]
        for uniform in (True, False):
            arm = stats.copy()
            rng = np.random.default_rng((seed, DUMMY_STREAM))
            arm.states = [a + b for a, b in zip(arm.states, dummy_states(stats.spec, dummies, rng, uniform=uniform))]
            arm.dummies = float(dummies)
            models.append(build_model(arm, ESTIMATOR, 1.0))
        scores, _ = runner._score(models, seed, False)
        for arm, score in zip(ARMS, scores):
            accuracy[arm].append(float(score))
        _, test, _ = runner.split(seed)
        constant.append(float(np.bincount(runner.labels[test], minlength=runner.k).max() / len(test)))
    return {"problem": problem, "people": people, "central": central, "dummies": dummies, "local": local,
            "removable": removable,
            "constant": float(np.mean(constant)), **{arm: np.array(v) for arm, v in accuracy.items()}}  # fmt: skip


def _removable(spec, dummies: int) -> float:
    """The share of the variance uniform dummies add to the count estimates (summed over every
    cell of every input) that a composition can remove: the spread of uniform values,
    ``M·π_i·(1/d)(1 − π_i/d)`` per cell, against that plus the randomiser's ``M·π_i·Var``."""
    from participant.dummies import dummy_expectation
    from participant.reporting import input_probabilities

    values = noise = 0.0
    for oracle, share, (_, mean) in zip(spec.oracles, input_probabilities(spec), dummy_expectation(spec)):
        d = oracle.state_size
        values += d * dummies * share * (1 / d) * (1 - share / d)
        noise += float(np.sum(dummies * share * oracle.variance(1, np.full(d, 1 / d))))
    return values / (values + noise)


def _rest() -> tuple:
    """The setting's θ and budget as the runner's defaults."""
    from protocols import DEFAULT_THETA

    return (DEFAULT_THETA, "one-report")


def mean_se(values: np.ndarray) -> str:
    return f"{values.mean():+.4f} ± {values.std(ddof=1) / np.sqrt(len(values)):.4f}"


def main() -> None:
    args, centrals, _, cells = grid(cell, __doc__.split("\n\n")[0])
    lines = [
        (
            f"# What the default dummies cost, uniform and composed (`python research/dummy_composition.py --reps {args.reps} "
            f"--central {args.central}`)"
        ),
        "",
        (
            f"Test accuracy over {args.reps} paired runs (seeds 0–{args.reps - 1}; fast mode, protocol auto, the default "
            "estimator), the whole training split one batch of n people and the default M = n dummies, at the local ε that "
            "meets the central ε whether the batch's others are people or dummies (δ = 1/(10 n)). *Cost*: accuracy without "
            "dummies less accuracy with them, paired (same people's reports and dummies' stream per seed), mean ± SE. "
            "*Removable*: the share of the variance uniform dummies add to the count estimates that is the spread of their "
            "values, which a composition removes; the rest is the randomiser's noise, which any dummy drawn by the "
            "collection's randomiser adds."
        ),
        "",
        "<!-- --8<-- [start:summary] -->",
    ]
    for central in centrals:
        rows = [c for c in cells if c["central"] == central]
        uniform = np.array([(c["none"] - c["uniform"]).mean() for c in rows])
        composed = np.array([(c["none"] - c["composed"]).mean() for c in rows])
        both = (
            np.concatenate([c["none"] - c["uniform"] for c in rows]),
            np.concatenate([c["none"] - c["composed"] for c in rows]),
        )
        lines += [
            (
                f"Central ε {central:g}, mean cost over the {len(rows)} problems: uniform dummies {uniform.mean():+.4f}, "
                f"composed {composed.mean():+.4f} (ratio {composed.mean() / uniform.mean():.2f}); over all "
                f"{len(both[0])} paired runs {mean_se(both[0])} and {mean_se(both[1])}."
            ),
            "",
        ]
    lines += [
        "<!-- --8<-- [end:summary] -->",
        "",
        "| problem | n | central ε | M | local ε | removable | constant | no dummies | cost, uniform | cost, composed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c['problem']} | {c['people']:,} | {c['central']:g} | {c['dummies']:,} | {c['local']:.2f} | {c['removable']:.2f} | "
            f"{c['constant']:.3f} | {c['none'].mean():.3f} | {mean_se(c['none'] - c['uniform'])} | "
            f"{mean_se(c['none'] - c['composed'])} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
