"""Are the Gaussian model's reported standard errors what they say? Coverage and bias against known truth.

    python research/gaussian_calibration.py [--reps 100] [--jobs 1]

Known truth: two classes (30 % and 70 %), two coordinates in [-1, 1] (the minority's values
N(−0.2, 0.15²), the majority's N(0.2, 0.3²), clipped), n = 280, 10^3 and 10^4 people, ε 0.5, 1
and 4, approaches 1, 2 and 3, exact fast mode, ``--reps`` collections per cell (seed
``1000·approach + 10·ε + n``). The truth is the surveyed people's own: each class's share, and its
mean and variance (``ddof = 0``) of each coordinate. Per cell, over the collections and the 4
(class, coordinate) cells or the 2 classes:

- the reported class variance (``variance_estimate``, ``variance_se``): the share of cells beyond
  2 standard errors of the truth and the mean error in standard errors, before (the formulas this
  study replaced, kept below) and after;
- the class means (``class_mean_standard_error`` of ``evidence``): the share beyond 2 SE;
- the class prior (``class_prior_standard_error``): the share beyond 2 SE, before and after.

Then the few-reporters case: 280 people and 34 coordinates, approach 3 (the class input gets one
report in 69, about 4), ε 0.5, 1 and 4, ``4·--reps`` collections: the class prior's share beyond
2 SE, before and after, and the class means' (unchanged). Collections where nobody reported the
class are left out (no estimate).

Then a small, wide file: 300 people, 32 coordinates (N(0.1, 0.3²), class b's shifted by 0.2),
even classes, ε = 1, approaches 1 to 3, 30 collections (seed 5): the reported variance's share
beyond 2 SE and its mean error in SE, before and after.

The model's class prior, means and predictive variances (what it classifies with) do not use
these formulas: its accuracy is unchanged by construction.

Writes ``research/results/gaussian_calibration.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

RESULTS = Path(__file__).with_name("results") / "gaussian_calibration.md"


def variances_before(stats, prior, theta, mean_square, var_theta, var_square):
    """The reported variance and its standard error as computed before: the plug-in ``θ̂²`` (the
    unclipped mean's) in the error, ``+ Var(θ̂)`` undivided, and the class prior's variance at the
    estimated prior, as if its reporters were drawn with replacement."""
    estimate = mean_square - theta**2 + var_theta
    first, second = np.clip(theta, -1.0, 1.0), np.clip(mean_square, 0.0, 1.0)
    se = np.sqrt(var_square + 4 * theta**2 * var_theta + 2 * var_theta**2)
    n = max(stats.states[0].n, 1)
    var_prior = (stats.spec.oracles[0].variance(n, prior * n) / n**2)[:, None]
    p = prior[:, None]
    estimate = estimate - (second - 3 * first**2) * var_prior / p**2
    se = np.sqrt(se**2 + ((2 * first**2 - second) / p) ** 2 * var_prior)
    return estimate, se


def spec_for(r: int, epsilon: float, approach: int):
    from participant import CollectionSpec
    from participant.continuous import ContinuousFeature, Preparation

    features = Preparation([ContinuousFeature(f"x{i}", -1, 1) for i in range(r)])
    return CollectionSpec([], ["a", "b"], "DE", epsilon, continuous=features, model="gaussian", approach=approach)


def population(rng, n: int, r: int):
    y = np.where(rng.random(n) < 0.3, "b", "a")
    x = np.clip(np.where((y == "b")[:, None], rng.normal(-0.2, 0.15, (n, r)), rng.normal(0.2, 0.3, (n, r))), -1, 1)
    return x, y


def prior_errors(stats, truth):
    """The class input's unbiased shares less ``truth``, and their standard errors before and after."""
    from aggregator.estimation.class_prior import pooled_class_shares, pooled_covariance, reported_covariance
    from aggregator.estimation.simplex import project_to_simplex

    pooled = pooled_class_shares(stats)
    if pooled is None:
        return None
    prior = project_to_simplex(pooled.shares, 1.0)
    before = np.sqrt(np.diag(pooled_covariance(stats, pooled, prior)))
    after = np.sqrt(np.diag(reported_covariance(stats, pooled, prior)))
    return pooled.shares - truth, before, after


def truth_cell(n: int, epsilon: float, approach: int, reps: int, r: int = 2) -> dict:
    """Coverage and bias of the reported variance, mean and prior over ``reps`` collections."""
    from aggregator.estimation import gaussian as g
    from aggregator.estimation.evidence import class_mean_errors
    from participant.encoding import population_inputs
    from sim.experiment import simulate_collection

    spec = spec_for(r, epsilon, approach)
    seed = 1000 * approach + int(10 * epsilon) + n
    rng = np.random.default_rng(seed)
    z = {"var before": [], "var after": [], "mean": [], "prior before": [], "prior after": []}
    for _ in range(reps):
        x, y = population(rng, n, r)
        stats = simulate_collection(spec, population_inputs(spec, x, y), rng, "fast")
        if stats.states[0].n == 0:
            continue
        true_var = np.array([x[y == c].var(axis=0) for c in ("a", "b")])
        true_mean = np.array([x[y == c].mean(axis=0) for c in ("a", "b")])
        prior = g.class_prior(stats, "normsub")
        theta, mean_square = g.class_moments(stats, prior)
        var_theta, var_square = g.moment_variances(stats, prior, np.clip(theta, -1, 1), np.clip(mean_square, 0, 1))
        est, se = variances_before(stats, prior, theta, mean_square, var_theta, var_square)
        z["var before"].append((est - true_var) / se)
        est, se = g.reported_variances(stats, prior, theta, mean_square, var_theta, var_square)
        z["var after"].append((est - true_var) / se)
        z["mean"].append((theta - true_mean) / class_mean_errors(stats))
        err, before, after = prior_errors(stats, np.array([np.mean(y == c) for c in ("a", "b")]))
        z["prior before"].append(err / before)
        z["prior after"].append(err / after)
    row = {"n": n, "eps": epsilon, "approach": approach, "collections": len(z["mean"]), "seed": seed}
    for name, values in z.items():
        values = np.array(values)
        row[f"{name} beyond"] = float(np.mean(np.abs(values) > 2))
        row[f"{name} bias"] = float(np.mean(values))
    return row


def few_reporters_cell(epsilon: float, reps: int) -> dict:
    """The class prior's and the class means' coverage with 280 people and 34 coordinates (approach 3)."""
    from aggregator.estimation import gaussian as g
    from aggregator.estimation.evidence import class_mean_errors
    from participant.encoding import population_inputs
    from sim.experiment import simulate_collection

    spec = spec_for(34, epsilon, 3)
    seed = 7000 + int(10 * epsilon)
    rng = np.random.default_rng(seed)
    before, after, reporters, means = [], [], [], []
    for _ in range(reps):
        x, y = population(rng, 280, 34)
        stats = simulate_collection(spec, population_inputs(spec, x, y), rng, "fast")
        found = prior_errors(stats, np.array([np.mean(y == c) for c in ("a", "b")]))
        if found is None:
            continue
        err, b, a = found
        theta, _ = g.class_moments(stats, g.class_prior(stats, "normsub"))
        true_mean = np.array([x[y == c].mean(axis=0) for c in ("a", "b")])
        means.append(np.mean(np.abs(theta - true_mean) > 2 * class_mean_errors(stats)))
        before.append(err / b)
        after.append(err / a)
        reporters.append(stats.states[0].n)
    before, after = np.array(before), np.array(after)
    return {
        "eps": epsilon, "collections": len(before), "seed": seed, "reporters": float(np.mean(reporters)),
        "before": float(np.mean(np.abs(before) > 2)), "after": float(np.mean(np.abs(after) > 2)),
        "sd before": float(np.std(before)), "sd after": float(np.std(after)), "means": float(np.mean(means)),
    }  # fmt: skip


def wide_cell(approach: int, reps: int = 30) -> dict:
    """The reported variance on 300 people and 32 coordinates at ε = 1, before and after."""
    from aggregator.estimation import gaussian as g
    from participant.encoding import population_inputs
    from sim.experiment import simulate_collection

    r, n = 32, 300
    spec = spec_for(r, 1.0, approach)
    rng = np.random.default_rng(5)
    before, after = [], []
    for _ in range(reps):
        y = np.where(rng.random(n) < 0.5, "b", "a")
        x = np.clip(rng.normal(0.1, 0.3, (n, r)) + (y == "b")[:, None] * 0.2, -1, 1)
        truth = np.array([x[y == c].var(axis=0) for c in ("a", "b")])
        stats = simulate_collection(spec, population_inputs(spec, x, y), rng, "fast")
        prior = g.class_prior(stats, "normsub")
        theta, mean_square = g.class_moments(stats, prior)
        var_theta, var_square = g.moment_variances(stats, prior, np.clip(theta, -1, 1), np.clip(mean_square, 0, 1))
        est, se = variances_before(stats, prior, theta, mean_square, var_theta, var_square)
        before.append((est - truth) / se)
        est, se = g.reported_variances(stats, prior, theta, mean_square, var_theta, var_square)
        after.append((est - truth) / se)
    before, after = np.array(before), np.array(after)
    return {
        "approach": approach, "before": float(np.mean(np.abs(before) > 2)), "after": float(np.mean(np.abs(after) > 2)),
        "bias before": float(before.mean()), "bias after": float(after.mean()),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100, help="collections per known-truth cell")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    cells = [(n, e, a) for a in (3, 1, 2) for e in (0.5, 1.0, 4.0) for n in (280, 1000, 10_000)]
    rows = Parallel(n_jobs=args.jobs)(delayed(truth_cell)(n, e, a, args.reps) for n, e, a in cells)
    few = Parallel(n_jobs=args.jobs)(delayed(few_reporters_cell)(e, 4 * args.reps) for e in (0.5, 1.0, 4.0))
    lines = [
        f"# Gaussian standard errors against known truth (`python research/gaussian_calibration.py --reps {args.reps}`)",
        "",
        "Share of cells beyond 2 standard errors of the truth (calibrated: about 0.05) and the mean error in",
        "standard errors (bias), per cell of approach, ε and people; 4 (class, coordinate) cells or 2 classes",
        "per collection.",
        "",
        (
            "| approach | ε | n | collections (seed) | variance before: beyond, bias | variance after: beyond, bias "
            "| mean: beyond | prior before: beyond | prior after: beyond |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['approach']} | {r['eps']:g} | {r['n']:,} | {r['collections']} ({r['seed']}) "
            f"| {r['var before beyond']:.3f}, {r['var before bias']:+.2f} | {r['var after beyond']:.3f}, {r['var after bias']:+.2f} "
            f"| {r['mean beyond']:.3f} | {r['prior before beyond']:.3f} | {r['prior after beyond']:.3f} |"
        )
    summary = {
        k: [r[k] for r in rows]
        for k in (
            "var before beyond",
            "var after beyond",
            "mean beyond",
            "prior before beyond",
            "prior after beyond",
            "var before bias",
            "var after bias",
        )
    }
    lines += [
        "",
        "Over the 27 cells: " + "; ".join(
            f"{k}: {np.min(v):.3f} to {np.max(v):.3f} (mean {np.mean(v):.3f})" for k, v in summary.items()
        ) + ".",
        "",
        "## The class prior when few people report the class (280 people, 34 coordinates, approach 3)",
        "",
        (
            "| ε | collections (seed) | class reports (mean) | beyond 2 SE before | after | sd of error/SE before "
            "| after | class means beyond 2 SE |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in few:
        lines.append(
            f"| {r['eps']:g} | {r['collections']} ({r['seed']}) | {r['reporters']:.1f} | {r['before']:.3f} "
            f"| {r['after']:.3f} | {r['sd before']:.2f} | {r['sd after']:.2f} | {r['means']:.3f} |"
        )
    wide = [wide_cell(a) for a in (1, 2, 3)]
    lines += [
        "",
        "## A small, wide file (300 people, 32 coordinates, ε = 1, 30 collections, seed 5)",
        "",
        "| approach | variance before: beyond, bias | variance after: beyond, bias |",
        "|---|---|---|",
    ]
    for r in wide:
        lines.append(
            f"| {r['approach']} | {r['before']:.3f}, {r['bias before']:+.2f} | {r['after']:.3f}, {r['bias after']:+.2f} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
