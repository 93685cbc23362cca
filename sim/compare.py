"""``python -m sim compare``: the price of local privacy, beside central-DP baselines.

For every ε and repetition (the simulator's 80/20 splits): our LDP Naive Bayes (each person
sends one report at ε; default protocol and estimator) and the central-DP classifiers of
comparing-dp-classifiers.txt (Naive Bayes, CART, SVM; a trusted curator holds the raw rows and releases an ε-DP model),
each beside its non-private counterpart. Prints a table and writes a plot.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .baselines import DPSVM, DPDecisionTree, DPNaiveBayes
from .datasets import dataset_names, load_dataset
from .experiment import runner_for

MODELS = [
    ("LDP Naive Bayes (local, ours)", "local"),
    ("DP Naive Bayes (central)", "central"),
    ("DP decision tree (central)", "central"),
    ("DP SVM (central)", "central"),
]


def compare(dataset, epsilons: list[float], reps: int, seed: int = 0) -> dict:
    """Accuracies ``{model: array (len(epsilons), reps)}`` plus the non-private counterparts
    ``{model: array (reps,)}``."""
    runner = runner_for(dataset)
    accuracy = {name: np.zeros((len(epsilons), reps)) for name, _ in MODELS}
    nonprivate = {name: np.zeros(reps) for name, _ in MODELS}
    with tqdm(total=len(epsilons) * reps, desc="compare", unit="run") as progress:
        for r in range(reps):
            s = seed + r
            train, test, nb_nonprivate = runner.split(s)
            X, y = runner.codes, runner.labels
            args = (runner.n_categories, runner.k)
            nonprivate[MODELS[0][0]][r] = nb_nonprivate
            nonprivate[MODELS[1][0]][r] = DPNaiveBayes(None, *args).fit(X[train], y[train]).score(X[test], y[test])
            nonprivate[MODELS[2][0]][r] = DPDecisionTree(None, *args).fit(X[train], y[train]).score(X[test], y[test])
            nonprivate[MODELS[3][0]][r] = DPSVM(None, *args).fit(X[train], y[train]).score(X[test], y[test])
            for e, eps in enumerate(epsilons):
                ours = runner.run("auto", eps, s, ("normsub",), mode="fast").accuracy["normsub"]
                accuracy[MODELS[0][0]][e, r] = ours
                rng = np.random.default_rng([s, e])
                accuracy[MODELS[1][0]][e, r] = (
                    DPNaiveBayes(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test])
                )
                accuracy[MODELS[2][0]][e, r] = (
                    DPDecisionTree(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test])
                )
                accuracy[MODELS[3][0]][e, r] = (
                    DPSVM(eps, *args, rng=rng).fit(X[train], y[train]).score(X[test], y[test])
                )
                progress.update()
    return {"accuracy": accuracy, "nonprivate": nonprivate}


def plot(result: dict, epsilons: list[float], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, _ in MODELS:
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
    ax.set_xscale("log")
    ax.set_xlabel("ε (local: per person; central: for the whole data set)")
    ax.set_ylabel("accuracy (dotted: without privacy)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=dataset_names(), required=True)
    parser.add_argument("--eps", default="0.1,0.5,1,2,5", help="comma-separated ε values")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", metavar="DIR")
    parser.add_argument("--out", default="results", help="folder for the plot (default results)")
    args = parser.parse_args(argv)
    data = load_dataset(args.dataset, args.data_dir)
    if data.continuous:
        parser.error("compare covers the categorical data sets so far (numerical baselines are not implemented yet)")
    epsilons = [float(e) for e in args.eps.split(",")]
    result = compare(data, epsilons, args.reps, args.seed)
    header = "| model | privacy | " + " | ".join(f"ε={e:g}" for e in epsilons) + " | non-private |"
    print(f"{data.name}: mean accuracy over {args.reps} splits")
    print(header)
    print("|---|---|" + "---|" * len(epsilons) + "---|")
    for name, model in MODELS:
        acc = result["accuracy"][name].mean(axis=1)
        print(
            f"| {name} | {model} | "
            + " | ".join(f"{a:.3f}" for a in acc)
            + f" | {result['nonprivate'][name].mean():.3f} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"compare-{data.name}.png"
    plot(result, epsilons, f"{data.name}: local vs central DP", path)
    print(f"plot: {path}", file=sys.stderr)
    return 0
