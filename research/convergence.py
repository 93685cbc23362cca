"""How the conditional probabilities' error falls with the number of people, per estimator.

    python research/convergence.py [--seeds 10] [--protocol OUE] [--eps 1]

A known model: two classes (0.3 / 0.7) and three features, one of 8 values whose conditionals
differ by class, one of 64 values that differ by class, and one of 64 values with one skewed
(Zipf) distribution for both classes (no class signal at all). For n = 10^3 ... 10^6 people (fast
mode, one report each), the mean over seeds of each feature's largest absolute conditional error,
and the factor by which it falls per decade of n (1/sqrt(n) falls 3.16 times). Writes
research/results/convergence.md.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import numpy as np

from aggregator.estimation.estimators import normsub_estimator, paper_estimator
from participant import CollectionSpec, Feature
from sim.synthetic import known_model_statistics

RESULTS = Path(__file__).with_name("results") / "convergence.md"
SIZES = (1_000, 10_000, 100_000, 1_000_000)


def known_model() -> tuple[np.ndarray, list[np.ndarray], list[str]]:
    """The prior, the conditionals (one ``(2, d)`` table per feature) and the features' names."""
    rng = np.random.default_rng(0)
    zipf = 1.0 / np.arange(1, 65)
    zipf /= zipf.sum()
    conditionals = [rng.dirichlet(np.ones(8), size=2), rng.dirichlet(np.ones(64), size=2), np.vstack([zipf, zipf])]
    return np.array([0.3, 0.7]), conditionals, ["d = 8, class signal", "d = 64, class signal", "d = 64, skewed, none"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--protocol", default="OUE")
    parser.add_argument("--eps", type=float, default=1.0)
    args = parser.parse_args()
    prior, conditionals, names = known_model()
    spec = CollectionSpec(
        [Feature(f"f{i}", [str(j) for j in range(t.shape[1])]) for i, t in enumerate(conditionals)],
        ["a", "b"], args.protocol, args.eps,
    )  # fmt: skip
    estimators = {
        "paper": paper_estimator,
        "normsub (the default: toward the marginal)": normsub_estimator,
        "strength 1": partial(normsub_estimator, strength=1.0),
        "toward uniform": partial(normsub_estimator, target="uniform"),
    }
    error = {}  # (estimator, feature, n) -> mean largest error
    for n in SIZES:
        runs = {name: [] for name in estimators}
        for seed in range(args.seeds):
            stats = known_model_statistics(spec, prior, conditionals, n, np.random.default_rng(seed + 1))
            for name, estimate in estimators.items():
                model = estimate(stats)
                runs[name].append([np.abs(np.exp(t) - c).max() for t, c in zip(model.feature_log_prob, conditionals)])
        for name, values in runs.items():
            for i, value in enumerate(np.mean(values, axis=0)):
                error[name, i, n] = value
    lines = [
        f"# Conditional error against n (`python research/convergence.py --seeds {args.seeds} --protocol {args.protocol} "
        f"--eps {args.eps:g}`)",
        "",
        "Mean over seeds of the largest |P̂(a|c) − P(a|c)| of each feature; last column: the fall per decade "
        "from 10^5 to 10^6 (1/sqrt(n): 3.16).",
        "",
        "| estimator | feature | " + " | ".join(f"n = 10^{int(np.log10(n))}" for n in SIZES) + " | fall per decade |",
        "|---|---|" + "---|" * len(SIZES) + "---|",
    ]
    for name in estimators:
        for i, feature in enumerate(names):
            row = [error[name, i, n] for n in SIZES]
            lines.append(f"| {name} | {feature} | " + " | ".join(f"{v:.4f}" for v in row) + f" | {row[-2] / row[-1]:.2f}× |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
