"""``python -m sim compare``: the price of local privacy, beside central-DP baselines.

For every ε and repetition (the simulator's 80/20 splits): our LDP Naive Bayes (each person
sends one report at ε; default protocol and estimator) and the central-DP classifiers of
comparing-dp-classifiers.txt (Naive Bayes, CART, SVM; a trusted curator holds the raw rows and releases an ε-DP model),
each beside its non-private counterpart. Prints a table and writes a plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from participant.usage import Parser, non_negative_int, positive_int

from .cli_options import (
    add_central_options,
    add_csv_options,
    check_common,
    csv_source,
    load_data,
    output_folder,
    shuffled_for,
    training_people,
)
from .cli_options import epsilons as epsilon_list
from .datasets import ENV_VAR, dataset_names

# The baselines and the simulator (scikit-learn) are imported where a comparison runs: `--help`
# and a refused option answer without them.

RADIUS = 1  # Hamming radius of the radius-neighbours baseline on categorical data

MODELS = [
    ("LDP Naive Bayes (local, ours)", "local"),
    ("DP Naive Bayes (central)", "central"),
    ("DP decision tree (central)", "central"),
    ("DP SVM (central)", "central"),
]


def _continuous_models(dataset, seed: int):
    """Per split: train/test arrays for the numerical baselines and binned codes for the tree."""
    from participant import encode_features

    from .experiment import Setup, spec_for, split

    X_train, X_test, y_train, y_test = split(dataset, seed)
    spec = spec_for(dataset, "DE", 1.0, setup=Setup(bins=4))  # equal-width bins of the declared ranges
    labels = {c: i for i, c in enumerate(dataset.classes)}
    ytr, yte = np.array([labels[v] for v in y_train]), np.array([labels[v] for v in y_test])
    codes_tr, codes_te = encode_features(X_train, spec), encode_features(X_test, spec)
    return X_train, X_test, ytr, yte, codes_tr, codes_te, [4] * len(dataset.feature_names)


SHUFFLED = ("LDP Naive Bayes, shuffled (ours)", "shuffled")


def compare(dataset, epsilons: list[float], reps: int, seed: int = 0, knn: int = 0, shuffled: dict | None = None) -> dict:
    """Accuracies ``{model: array (len(epsilons), reps)}`` plus the non-private counterparts
    ``{model: array (reps,)}`` and ``majority``, the accuracy of always predicting each split's
    most common training class (shape ``(reps,)``: the constant classifier every model must beat). Numerical data sets use their declared bounds: Gaussian NB and the
    SVM on the values, the tree on equal-width bins, our LDP model on the paper's bins. ``knn`` > 0
    adds the private k-NN classifier with that k (categorical data sets; slow on large ones).
    ``shuffled`` (central ε → a :class:`~sim.cli_options.Shuffled`) adds our model on shuffled
    reports: at each ε of the axis, the local ε (and the shuffler's dummies) whose shuffled reports
    are that ε against the aggregator alone."""
    from tqdm import tqdm

    from .baselines import DPSVM, DPDecisionTree, DPGaussianNB, DPNaiveBayes, DPRadiusNeighbours
    from .baselines.neighbours import DPKNearestNeighbours
    from .baselines.smooth_nb import SmoothSensitivityNB
    from .experiment import run_once, runner_for

    models = models_for(dataset, knn)
    if shuffled:
        models.insert(1, SHUFFLED)
    names = [name for name, _ in models]
    ours_names = names[: 2 if shuffled else 1]
    accuracy = {name: np.zeros((len(epsilons), reps)) for name in names}
    nonprivate = {name: np.zeros(reps) for name in names}
    majority = np.zeros(reps)
    k = len(dataset.classes)
    with tqdm(total=len(epsilons) * reps, desc="compare", unit="run") as progress:
        for r in range(reps):
            s = seed + r
            if dataset.continuous:
                Xtr, Xte, ytr, yte, ctr, cte, bins = _continuous_models(dataset, s)
                bounds = dataset.ranges
                baselines = [
                    lambda eps, rng: DPGaussianNB(eps, bounds, k, rng=rng).fit(Xtr, ytr).score(Xte, yte),
                    lambda eps, rng: DPDecisionTree(eps, bins, k, rng=rng).fit(ctr, ytr).score(cte, yte),
                    lambda eps, rng: DPSVM(eps, None, k, rng=rng, bounds=bounds).fit(Xtr, ytr).score(Xte, yte),
                    lambda eps, rng: SmoothSensitivityNB(eps, bounds, k, rng=rng).fit(Xtr, ytr).score(Xte, yte),
                ]
                ours = lambda eps, dummies=0: run_once(  # noqa: E731
                    dataset, "auto", eps, s, ("normsub",), mode="fast", log_loss=False, dummies=dummies
                )
            else:
                runner = runner_for(dataset)
                train, test, _ = runner.split(s)
                X, y, args = runner.codes, runner.labels, (runner.n_categories, runner.k)
                baselines = [
                    lambda eps, rng: DPNaiveBayes(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test]),
                    lambda eps, rng: (
                        DPDecisionTree(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test])
                    ),
                    lambda eps, rng: DPSVM(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test]),
                    lambda eps, rng: (
                        DPRadiusNeighbours(eps, *args, RADIUS, rng=rng).fit(X[train], y[train]).score(X[test], y[test])
                    ),
                ]
                if knn:
                    baselines.append(
                        lambda eps, rng: (
                            DPKNearestNeighbours(eps, *args, knn, rng=rng)
                            .fit(X[train], y[train])
                            .score(X[test], y[test])
                        )
                    )
                ours = lambda eps, dummies=0: runner.run(  # noqa: E731
                    "auto", eps, s, ("normsub",), mode="fast", log_loss=False, dummies=dummies
                )
            first = ours(epsilons[0])
            nonprivate[names[0]][r], majority[r] = first.nonprivate_accuracy, first.majority_accuracy
            central = names[len(ours_names):]
            assert len(baselines) == len(central), "every baseline needs its name"
            for name in ours_names[1:]:
                nonprivate[name][r] = first.nonprivate_accuracy
            for name, fit in zip(central, baselines):
                nonprivate[name][r] = fit(None, None)
            for e, eps in enumerate(epsilons):
                accuracy[names[0]][e, r] = ours(eps).accuracy["normsub"]
                if shuffled:
                    accuracy[SHUFFLED[0]][e, r] = ours(shuffled[eps].local, shuffled[eps].dummies).accuracy["normsub"]
                rng = np.random.default_rng([s, e])
                for name, fit in zip(central, baselines):
                    accuracy[name][e, r] = fit(eps, rng)
                progress.update()
    return {"accuracy": accuracy, "nonprivate": nonprivate, "majority": majority, "models": models}


def models_for(dataset, knn: int = 0) -> list[tuple[str, str]]:
    if dataset.continuous:
        return [
            MODELS[0],
            ("DP Gaussian Naive Bayes (central)", "central"),
            MODELS[2],
            MODELS[3],
            ("DP smooth-sensitivity Gaussian NB (central)", "central"),
        ]
    models = [*MODELS, (f"DP radius neighbours, Hamming r={RADIUS} (central)", "central")]
    return models + [(f"DP {knn}-NN, radius chosen privately (central)", "central")] if knn else models


def plot(result: dict, epsilons: list[float], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, _ in result["models"]:
        acc = result["accuracy"][name]
        (line,) = ax.plot(epsilons, acc.mean(axis=1), marker="o", label=name)
        ax.fill_between(
            epsilons,
            acc.mean(axis=1) - acc.std(axis=1),
            acc.mean(axis=1) + acc.std(axis=1),
            color=line.get_color(),
            alpha=0.15,
        )
        ax.axhline(result["nonprivate"][name].mean(), linestyle=":", color=line.get_color())
    ax.axhline(result["majority"].mean(), linestyle="--", color="grey", label="best constant (test rows)")
    ax.set_xscale("log")
    ax.set_xlabel("ε (local: per person; central: for the whole data set)")
    ax.set_ylabel("accuracy (dotted: without privacy; dashed: best constant)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_tables(result: dict, epsilons: list[float], seed: int, dataset: str, out: Path) -> list[dict]:
    """``runs.csv`` (one row per model, ε and split) and ``summary.csv`` (per model and ε: the mean
    and standard deviation of the accuracy, beside the non-private and constant classifiers', and
    the paired gain over the constant with its standard error) in ``out``; returns the summary."""
    import pandas as pd

    from .verdict import verdict

    runs, summary = [], []
    for name, privacy in result["models"]:
        for e, eps in enumerate(epsilons):
            accuracy = result["accuracy"][name][e]
            for r, value in enumerate(accuracy):
                runs.append({"dataset": dataset, "model": name, "privacy": privacy, "eps": eps, "rep": r,
                             "seed": seed + r, "accuracy": value,
                             "nonprivate_accuracy": result["nonprivate"][name][r],
                             "majority_accuracy": result["majority"][r]})  # fmt: skip
            found = verdict(accuracy, result["majority"], 0)
            summary.append({"dataset": dataset, "model": name, "privacy": privacy, "eps": eps, "reps": len(accuracy),
                            "accuracy_mean": float(accuracy.mean()), "accuracy_std": float(accuracy.std()),
                            "nonprivate_mean": float(result["nonprivate"][name].mean()),
                            "majority_mean": float(result["majority"].mean()), "gain_over_constant": found.gain,
                            "gain_over_constant_se": found.se, "beats_constant": found.learned})  # fmt: skip
    pd.DataFrame(runs).to_csv(out / "runs.csv", index=False)
    pd.DataFrame(summary).to_csv(out / "summary.csv", index=False)
    return summary


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m sim compare``."""
    parser = Parser(
        prog="python -m sim compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=dataset_names(), help="a UCI data set of the paper")
    source.add_argument(
        "--csv", type=csv_source, metavar="FILE[:LABEL]", help="your own data: a CSV file (see the data options)"
    )
    add_csv_options(parser)
    parser.add_argument("--eps", type=epsilon_list, default="0.1,0.5,1,2,5", help="comma-separated ε values")
    add_central_options(parser, many=True)
    parser.add_argument("--reps", type=positive_int, default=20, help="splits per ε (default 20)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the first split; split r uses seed+r (default 0)")
    parser.add_argument("--data-dir", metavar="DIR", help=f"folder holding the UCI files (or set ${ENV_VAR})")
    parser.add_argument(
        "--out", default="results", help="folder for runs.csv, summary.csv and the plot (default results)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")
    parser.add_argument(
        "--knn", type=non_negative_int, default=0, metavar="K", help="also run private K-NN (categorical data; slow)"
    )
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_common(parser, args)
    data = load_data(parser, args)
    eps_values, shuffled = args.eps, None
    if args.central_eps is not None:
        if any(a == "--eps" or a.startswith("--eps=") for a in argv):
            parser.error("--eps and --central-eps: give one (the axis is then the central epsilon)")
        eps_values = args.central_eps
        people = training_people(data)
        shuffled = {e: shuffled_for(e, people, args.delta, args.dummies, args.flooded_eps) for e in eps_values}
        for e in eps_values:
            print(f"central eps={e:g}: {shuffled[e].describe()}", file=sys.stderr)
    elif args.delta is not None or args.flooded_eps is not None or args.dummies is not None:
        parser.error("--delta, --flooded-eps and --dummies go with --central-eps")
    if args.knn and data.continuous:
        parser.error("--knn applies to the categorical data sets")
    out = output_folder(parser, args.out)
    result = compare(data, eps_values, args.reps, args.seed, args.knn, shuffled)
    summary = write_tables(result, eps_values, args.seed, data.name, out)
    if args.json:
        print(json.dumps(summary))
    else:
        header = "| model | privacy | " + " | ".join(f"ε={e:g}" for e in eps_values) + " | non-private |"
        print(f"{data.name}: mean accuracy over {args.reps} splits")
        print(header)
        print("|---|---|" + "---|" * len(eps_values) + "---|")
        for name, model in result["models"]:
            acc = result["accuracy"][name].mean(axis=1)
            print(
                f"| {name} | {model} | "
                + " | ".join(f"{a:.3f}" for a in acc)
                + f" | {result['nonprivate'][name].mean():.3f} |"
            )
        constant = f"{result['majority'].mean():.3f}"
        print(f"| best constant (test rows) | none | {' | '.join([constant] * len(eps_values))} | {constant} |")
    nothing = [row for row in summary if not row["beats_constant"]]
    if nothing:
        named = "; ".join(f"{row['model']} at ε={row['eps']:g}" for row in nothing[:4])
        more = f" and {len(nothing) - 4} more" if len(nothing) > 4 else ""
        print(f"{len(nothing)} of {len(summary)} cells do not beat the constant classifier by one standard error "
              f"(beats_constant in summary.csv): {named}{more}", file=sys.stderr)  # fmt: skip
    path = out / f"compare-{data.name}.png"
    plot(result, eps_values, f"{data.name}: local vs central DP", path)
    print(f"runs and summary: {out / 'runs.csv'}, {out / 'summary.csv'}; plot: {path}", file=sys.stderr)
    return 0
