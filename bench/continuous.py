"""Accuracy on the continuous data sets: the settings of the paper's figures 3 and 4.

    python bench/continuous.py [--reps 20] [--eps 0.5,1,2,4]

Figure 3: discretisation (DE and OUE) of the original features, PCA and DCA to one component
(Diabetes with PCA: six components, as the paper found best). Figure 4: Gaussian NB with
approaches 1-3 on the original features, PCA and DCA (one component). One report per person,
default estimator, beside the best constant classifier on the test rows (the same splits in
every row of a data set); for the discrete model, a second table of its paired differences with
the best constant and with ``prior only`` (the class the private reports say is most common: the
constant classifier the reports can give; ``bench/estimators.py``). Prints Markdown tables and
writes them to ``bench/results/continuous.md`` (``--out``);
projections are fitted on the training split, as in the paper (a real collection fits them on a
separate reference sample).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from estimators import register
from tqdm import tqdm

RESULTS = Path(__file__).with_name("results") / "continuous.md"

from sim.datasets import load_dataset
from sim.experiment import Setup, run_once

REDUCTIONS = {"original": (None, None), "PCA": ("pca", 1), "DCA": ("dca", 1)}


def cell(data, protocol, eps, setup, reps):
    """Mean accuracy over ``reps`` runs of the default estimator, of non-private Naive Bayes and of
    the best constant, and (discrete model; else None) the default's paired differences with the
    best constant and ``prior only``, each as ``(mean, standard error)``."""
    discrete = setup.model == "discrete"
    names = ("normsub", "prior only") if discrete else ("normsub",)
    runs = [run_once(data, protocol, eps, seed, names, setup=setup) for seed in range(reps)]
    means = tuple(
        np.mean(values)
        for values in zip(*((r.accuracy["normsub"], r.nonprivate_accuracy, r.majority_accuracy) for r in runs))
    )
    if not discrete:
        return (*means, None)
    others = [[r.majority_accuracy, r.accuracy["prior only"]] for r in runs]
    gains = np.array([r.accuracy["normsub"] for r in runs])[:, None] - np.array(others)
    return (*means, list(zip(gains.mean(axis=0), gains.std(axis=0, ddof=1) / np.sqrt(len(gains)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--out", default=str(RESULTS), help="the results file (default: bench/results/continuous.md)")
    args = parser.parse_args()
    lines = [f"# The continuous data sets (`python bench/continuous.py --reps {args.reps} --eps {args.eps}`)", ""]

    def emit(*parts: str) -> None:
        """Print a line of the tables and keep it for the results file."""
        line = " ".join(parts)
        print(line, flush=True)
        lines.append(line)

    register()  # `prior only`
    epsilons = [float(e) for e in args.eps.split(",")]
    rows = []
    jobs = []
    for name in ("australian", "diabetes"):
        for label, (reduce, components) in REDUCTIONS.items():
            if name == "diabetes" and reduce == "pca":
                components = 6
            for protocol in ("DE", "OUE"):
                jobs.append(
                    (name, f"discrete {protocol}", protocol, Setup("discrete", None, reduce, components), label)
                )
            for approach in (1, 2, 3):
                jobs.append(
                    (
                        name,
                        f"gaussian A{approach}",
                        "DE",
                        Setup("gaussian", None, reduce, 1 if reduce else None, approach),
                        label,
                    )
                )
    data = {n: load_dataset(n) for n in ("australian", "diabetes")}
    for name, model, protocol, setup, label in tqdm(jobs, desc="settings"):
        values = [cell(data[name], protocol, eps, setup, args.reps) for eps in epsilons]
        rows.append((name, model, label, [v[0] for v in values], values[-1][1], values[-1][2], [v[3] for v in values]))
    emit(
        f"| data set | model | features | {' | '.join(f'ε={e:g}' for e in epsilons)} | non-private | best constant |"
    )
    emit("|---|---|---|" + "---|" * len(epsilons) + "---|---|")
    for name, model, label, accs, nonprivate, majority, _ in rows:
        accuracies = " | ".join(f"{a:.3f}" for a in accs)
        emit(f"| {name} | {model} | {label} | {accuracies} | {nonprivate:.3f} | {majority:.3f} |")
    emit(
        "\nThe discrete model against the constant classifiers: `normsub` − best constant / `normsub` − `prior only`, paired (± standard error)\n"
    )
    emit(f"| data set | model | features | {' | '.join(f'ε={e:g}' for e in epsilons)} |")
    emit("|---|---|---|" + "---|" * len(epsilons))
    for name, model, label, _, _, _, gains in rows:
        if gains[0] is not None:
            cells = (f"{g[0][0]:+.3f} ± {g[0][1]:.3f} / {g[1][0]:+.3f} ± {g[1][1]:.3f}" for g in gains)
            emit(f"| {name} | {model} | {label} | " + " | ".join(cells) + " |")
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
