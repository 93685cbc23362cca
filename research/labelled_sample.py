"""A labelled sample pooled with the reports, against each alone.

    python research/labelled_sample.py [--reps 100] [--rows 300] [--eps 0.5,1,2,4] [--jobs 2]

For every problem of ``bench/problems.py`` whose training split keeps 1,000 reporting people once
the sample is set aside, per seed: the random 80/20 split, then ``--rows`` rows of the training
split drawn as the operator's labelled sample; those rows never report. Every other training row
sends one report (protocol ``auto``, exact fast mode). On the test rows: Naive Bayes on the sample
alone (scikit-learn's CategoricalNB, Laplace smoothing), the default model from the reports alone,
and the two pooled (:func:`aggregator.estimation.sample.pooled_with_sample`), with the majority class; paired
differences of the pooled model with each alone. Writes ``research/results/labelled_sample.md``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from problems import PROBLEMS, load_problem
from tqdm import tqdm

RESULTS = Path(__file__).with_name("results") / "labelled_sample.md"


def cell(problem: str, epsilon: float, reps: int, rows: int) -> dict | None:
    warnings.simplefilter("ignore")
    from sklearn.naive_bayes import CategoricalNB

    from aggregator import CollectionStatistics, build_model
    from aggregator.estimation.class_prior import pooled_class_shares, pooled_covariance
    from aggregator.estimation.sample import pooled_with_sample, report_share_variances
    from participant import choose_inputs
    from protocols import simulate_states
    from sim.experiment import runner_for

    runner = runner_for(load_problem(problem))
    spec = runner.spec("auto", epsilon, None, "one-report")
    scores = {"sample": [], "reports": [], "pooled": [], "majority": []}
    for seed in range(reps):
        train, test, _ = runner.split(seed)
        if len(train) - rows < 1000:
            return None
        rng = np.random.default_rng(seed)
        order = rng.permutation(train)
        sample, reporting = order[:rows], order[rows:]
        chosen = choose_inputs(spec, len(reporting), rng)
        histogram = np.bincount(runner.keys[reporting, chosen], minlength=runner.input_offsets[-1])
        offsets = runner.input_offsets
        stats = CollectionStatistics(spec)
        stats.states = simulate_states(spec.oracles, [histogram[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)], rng)
        model = build_model(stats, "normsub", temperature=1.0)
        pooled_shares = pooled_class_shares(stats)
        errors = np.sqrt(np.diag(pooled_covariance(stats, pooled_shares, model.class_prior)))
        variances = report_share_variances(spec, stats.estimated_counts(), [s.n for s in stats.states], model.class_prior)
        pooled = pooled_with_sample(model, errors, variances, runner.codes[sample], runner.labels[sample])
        nb = CategoricalNB(min_categories=runner.n_categories).fit(runner.codes[sample], runner.labels[sample])
        truth = runner.labels[test]
        codes = runner.codes[test]
        scores["sample"].append(np.mean(nb.predict(codes) == truth))
        scores["reports"].append(np.mean(model.joint_log_likelihood_codes(codes).argmax(axis=1) == truth))
        scores["pooled"].append(np.mean(pooled.joint_log_likelihood_codes(codes).argmax(axis=1) == truth))
        majority = np.bincount(runner.labels[train], minlength=runner.k).argmax()
        scores["majority"].append(np.mean(truth == majority))
    return {"problem": problem, "eps": epsilon, "people": len(reporting)} | {k: np.array(v) for k, v in scores.items()}


def paired(a: np.ndarray) -> str:
    return f"{a.mean():+.3f} ± {a.std(ddof=1) / np.sqrt(len(a)):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--rows", type=int, default=300, help="rows in the labelled sample")
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    cells = [(p, float(e)) for p in PROBLEMS for e in args.eps.split(",")]
    done = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(cell)(p, e, args.reps, args.rows) for p, e in cells)
    results = [r for r in tqdm(done, total=len(cells), desc="cells") if r is not None]
    lines = [
        f"# A labelled sample of {args.rows} rows pooled with the reports (`python research/labelled_sample.py "
        f"--reps {args.reps} --rows {args.rows}`)",
        "",
        "The sample's rows do not report. Accuracy on the held-out 20 %, paired over the same splits.",
        "",
        "| problem | ε | reporting people | majority | NB on the sample | reports alone | pooled "
        "| pooled − sample | pooled − reports |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['problem']} | {r['eps']:g} | {r['people']:,} | {r['majority'].mean():.3f} | {r['sample'].mean():.3f} "
            f"| {r['reports'].mean():.3f} | {r['pooled'].mean():.3f} | {paired(r['pooled'] - r['sample'])} "
            f"| {paired(r['pooled'] - r['reports'])} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
