"""Dummies of a balanced composition: what they would save in accuracy, and what they leak.

    python research/dummy_composition.py [--reps 8] [--central 2] [--problems car,adult,...] [--jobs 1]
    python research/dummy_composition.py --exact-only

The shuffler draws uniform dummies (:mod:`participant.dummies`). The alternative studied here,
not adopted: among the ``c`` dummies that chose an input with ``d`` values, each value ``⌊c/d⌋``
or ``⌈c/d⌉`` times, the remainder on values chosen uniformly without replacement
(:func:`balanced_counts`, :func:`composed_states`); each dummy still chooses its input as a device
does.

For every problem of ``bench/problems.py`` (the whole training split one batch of ``n`` people)
and every central ε, the default dummies ``M = ⌈DUMMY_SHARE·n⌉`` and the local ε that meets the
central ε both when the batch's others are people and when the aggregator wrote them all
(``protocols.shuffling.local_epsilon_for``, the *both* arm of ``research/dummies.py``). At that
local ε, ``--reps`` paired runs (seeds 0, 1, …; protocol ``auto``, fast mode, the default
estimator; the same people's reports in every arm of a seed, the dummies from the seed's own
stream) of three arms: no dummies, ``M`` uniform dummies
(:func:`participant.dummies.dummy_states`), and ``M`` composed dummies (:func:`composed_states`).
The *cost* of an arm is the paired accuracy without dummies less the arm's.

Then the exact flooded check (:func:`exact_section`, seconds; ``--exact-only`` recomputes just
that section of an existing results file): a class and one two-value feature, DE, 30 dummies,
δ 10⁻³, what an aggregator that wrote every other report of a batch sees of a person's report
among the dummies, computed outright (no sampling, no seeds) for uniform and for composed dummies.
Writes ``research/results/dummy_composition.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems
from problems import grid, load_problem

from aggregator import build_model
from participant import CollectionSpec, Feature
from participant.dummies import dummy_states
from participant.reporting import input_probabilities
from participant.spec import EPSILON_RANGE
from protocols.base import FrequencyOracle
from protocols.shuffling import default_delta, default_dummies, flooded_epsilon, local_epsilon_for
from sim.cli_options import training_people
from sim.experiment import DUMMY_STREAM, runner_for

RESULTS = Path(__file__).with_name("results") / "dummy_composition.md"
ESTIMATOR = "normsub"
ARMS = ("none", "uniform", "composed")
EXACT_START, EXACT_END = "<!-- --8<-- [start:exact] -->", "<!-- --8<-- [end:exact] -->"


def balanced_counts(count: int, d: int, rng) -> np.ndarray:
    """How many of ``count`` dummies carry each of ``d`` values, shape ``(d,)``: ``⌊count/d⌋``
    each, and one more for ``count mod d`` values chosen uniformly without replacement, so that
    each value's expected count is exactly ``count/d``."""
    counts = np.full(d, int(count) // d, dtype=np.int64)
    extra = int(count) % d
    if extra:
        counts[np.argsort(rng.random(d))[:extra]] += 1
    return counts


def composed_states(spec: CollectionSpec, count: int, rng) -> list:
    """The summed states (one per input) of ``count`` composed dummies of a frequency-oracle spec:
    inputs drawn as :func:`participant.dummies.dummy_states` draws them, values balanced among each
    input's dummies (:func:`balanced_counts`), randomised by the input's oracle."""
    states = []
    for oracle, drawn in zip(spec.oracles, rng.multinomial(count, input_probabilities(spec))):
        if not isinstance(oracle, FrequencyOracle):
            raise TypeError(f"composed dummies are studied for frequency oracles only, not {type(oracle).__name__}")
        states.append(oracle.simulate_counts(balanced_counts(int(drawn), oracle.domain_size, rng), rng))
    return states


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
        for draw in (dummy_states, composed_states):
            arm = stats.copy()
            rng = np.random.default_rng((seed, DUMMY_STREAM))
            arm.states = [a + b for a, b in zip(arm.states, draw(stats.spec, dummies, rng))]
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


def _add_report(law: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The law of an input's output counts (the first ``d − 1`` outputs' counts, one axis each;
    the last output's count is the total less them) after one more report with output law ``row``."""
    out = row[-1] * law
    for axis in range(law.ndim):
        to = [slice(None)] * law.ndim
        at = [slice(None)] * law.ndim
        to[axis], at[axis] = slice(1, None), slice(None, -1)
        out[tuple(to)] += row[axis] * law[tuple(at)]
    return out


def _de_rows(oracle) -> np.ndarray:
    """A DE oracle's output law per value, one row each, shape ``(d, d)``."""
    rows = np.full((oracle.state_size, oracle.state_size), oracle.q)
    np.fill_diagonal(rows, oracle.p)
    return rows


def _dummies_law(oracle, count: int, size: int, uniform: bool) -> np.ndarray:
    """The law of ``count`` dummies' output counts on one DE input: values uniform and independent
    (``uniform``) or composed (each value ⌊count/d⌋ times, the remainder on a uniformly chosen set
    of values), on a grid of ``size`` per axis."""
    from itertools import combinations

    rows = _de_rows(oracle)
    d = len(rows)
    law = np.zeros((size,) * (d - 1))
    law[(0,) * (d - 1)] = 1.0
    if uniform:
        for _ in range(count):
            law = _add_report(law, rows.mean(axis=0))
        return law
    for _ in range(count // d):
        for row in rows:
            law = _add_report(law, row)
    subsets = list(combinations(range(d), count % d))
    mixed = np.zeros_like(law)
    for subset in subsets:
        part = law
        for v in subset:
            part = _add_report(part, rows[v])
        mixed += part / len(subsets)
    return mixed


def flooded_views(spec: CollectionSpec, dummies: int, uniform: bool) -> np.ndarray:
    """What an aggregator that wrote every other report of a batch sees of a person's report among
    ``dummies`` dummies, for a spec of a class and one two-value feature (two DE inputs): the law of
    the outputs' counts per record (rows: the records (class, value) in order; columns: every
    reachable view), each dummy's input drawn as a device's, its value uniform or composed."""
    from scipy.stats import binom

    oracles = spec.oracles
    size = dummies + 2
    share = binom.pmf(np.arange(dummies + 1), dummies, input_probabilities(spec)[0])  # dummies on the class input
    laws = [[_dummies_law(o, c, size, uniform) for c in range(dummies + 1)] for o in oracles]
    rows = [_de_rows(o) for o in oracles]
    records = [(c, a) for a in range(2) for c in range(spec.n_classes)]
    columns = []
    for total in range(dummies + 2):  # reports on the class input, the person's among them or not
        views = []
        for c, a in records:
            own = [rows[0][c], rows[1][a * spec.n_classes + c]]
            law = np.zeros((size,) * 4)
            if total >= 1:  # the person reported the class
                law += (
                    0.5
                    * share[total - 1]
                    * np.multiply.outer(_add_report(laws[0][total - 1], own[0]), laws[1][dummies - total + 1])
                )
            if total <= dummies:  # the person reported the feature
                law += (
                    0.5
                    * share[total]
                    * np.multiply.outer(laws[0][total], _add_report(laws[1][dummies - total], own[1]))
                )
            views.append(law.ravel())
        views = np.array(views)
        columns.append(views[:, views.max(axis=0) > 0])
    out = np.concatenate(columns, axis=1)
    assert np.allclose(out.sum(axis=1), 1.0), out.sum(axis=1)
    return out


def hockey_stick(views: np.ndarray, epsilon: float) -> float:
    """The largest divergence ``Σ max(P − e^ε Q, 0)`` over every two records' views: the δ the
    views meet at ``epsilon``."""
    return max(
        float(np.maximum(views[x] - np.exp(epsilon) * views[y], 0).sum())
        for x in range(len(views)) for y in range(len(views)) if x != y
    )  # fmt: skip


def exact_epsilon(views: np.ndarray, delta: float, high: float, steps: int = 30) -> float:
    """The smallest ε (within ``high·2^-steps``, rounded up) at which the views meet ``delta``,
    by bisection on [0, ``high``] (the divergence falls as ε grows)."""
    low = 0.0
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if hockey_stick(views, mid) <= delta else (mid, high)
    return high


def exact_section(local_epsilons=(1.0, 2.0), dummies: int = 30, delta: float = 1e-3) -> list[str]:
    """The exact flooded check as markdown lines: per local ε, the accountant's ε for ``dummies``
    and for three times as many, the divergence of uniform and composed dummies at each, and the
    exact ε each meets ``delta`` at."""
    lines = [
        EXACT_START,
        (
            f"**Exact flooded privacy** (no sampling): a class and one two-value feature, DE, {dummies} dummies, "
            f"δ = {delta:g}; the view of an aggregator that wrote every other report of the batch, computed outright "
            "for every record. *Stated*: the accountant's ε for the person among the dummies "
            "(`protocols.shuffling.flooded_epsilon`); *3×*: what it would state for three times the dummies. "
            "Divergence: the largest hockey-stick divergence over every two records (the δ met at that ε); "
            "exact ε: the smallest ε at which it is at most δ (bisection)."
        ),
        "",
        "| ε₀ | dummies | stated ε | δ at stated, uniform | δ at stated, composed | 3× ε | δ at 3×, uniform | δ at 3×, composed | exact ε, uniform | exact ε, composed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for eps0 in local_epsilons:
        spec = CollectionSpec([Feature("f", ["a", "b"])], ["y", "n"], "DE", eps0)
        views = {uniform: flooded_views(spec, dummies, uniform) for uniform in (True, False)}
        stated = flooded_epsilon(eps0, dummies, delta)
        triple = flooded_epsilon(eps0, 3 * dummies, delta)
        at = {(e, u): hockey_stick(views[u], e) for e in (stated, triple) for u in (True, False)}
        exact = {u: exact_epsilon(views[u], delta, eps0) for u in (True, False)}
        lines.append(
            f"| {eps0:g} | {dummies} | {stated:.3f} | {at[stated, True]:.2e} | {at[stated, False]:.2e} | {triple:.3f} | "
            f"{at[triple, True]:.2e} | {at[triple, False]:.2e} | {exact[True]:.3f} | {exact[False]:.3f} |"
        )
    return lines + ["", EXACT_END]


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
    if "--exact-only" in sys.argv[1:]:
        text = RESULTS.read_text()
        exact = "\n".join(exact_section())
        if EXACT_START in text:
            head, rest = text.split(EXACT_START, 1)
            text = head + exact + rest.split(EXACT_END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + exact + "\n"
        RESULTS.write_text(text)
        print(exact)
        return
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
    lines += [""] + exact_section()
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
