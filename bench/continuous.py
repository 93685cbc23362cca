"""Accuracy on the continuous data sets: the settings of the paper's figures 3 and 4.

    python bench/continuous.py [--reps 20] [--eps 0.5,1,2,4]

Figure 3: discretisation (DE and OUE) of the original features, PCA and DCA to one component
(Diabetes with PCA: six components, as the paper found best). Figure 4: Gaussian NB with
approaches 1-3 on the original features, PCA and DCA (one component). One report per person,
default estimator, beside the constant classifier that always predicts the training split's
majority class (the same splits in every row of a data set); for the discrete model, a second
table of ``normsub``'s paired difference with ``strength 1`` (its smoothing strength fixed at 1,
as before the strength was chosen per collection). Prints Markdown tables; projections are fitted on the training split, as in the
paper (a real collection fits them on a separate reference sample).
"""

from __future__ import annotations

import argparse
from functools import partial

import numpy as np
from tqdm import tqdm

from sim.datasets import load_dataset
from sim.experiment import Setup, run_once

REDUCTIONS = {"original": (None, None), "PCA": ("pca", 1), "DCA": ("dca", 1)}


def cell(data, protocol, eps, setup, reps):
    """Mean accuracy over ``reps`` runs of the default estimator, of non-private Naive Bayes and of
    the majority class, and (discrete model; else None) the default's paired difference with
    ``strength 1`` as ``(mean, standard error)``."""
    discrete = setup.model == "discrete"
    names = ("normsub", "strength 1") if discrete else ("normsub",)
    runs = [run_once(data, protocol, eps, seed, names, setup=setup) for seed in range(reps)]
    means = tuple(
        np.mean(values)
        for values in zip(*((r.accuracy["normsub"], r.nonprivate_accuracy, r.majority_accuracy) for r in runs))
    )
    if not discrete:
        return (*means, None)
    gain = np.array([r.accuracy["normsub"] - r.accuracy["strength 1"] for r in runs])
    return (*means, (gain.mean(), gain.std(ddof=1) / np.sqrt(len(gain))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    args = parser.parse_args()
    from aggregator import estimators

    estimators.ESTIMATORS["strength 1"] = partial(estimators.normsub_estimator, strength=1.0)
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
    print(
        f"| data set | model | features | {' | '.join(f'ε={e:g}' for e in epsilons)} | non-private | majority class |"
    )
    print("|---|---|---|" + "---|" * len(epsilons) + "---|---|")
    for name, model, label, accs, nonprivate, majority, _ in rows:
        accuracies = " | ".join(f"{a:.3f}" for a in accs)
        print(f"| {name} | {model} | {label} | {accuracies} | {nonprivate:.3f} | {majority:.3f} |")
    print("\nThe discrete model: `normsub` − `strength 1`, paired (± standard error)\n")
    print(f"| data set | model | features | {' | '.join(f'ε={e:g}' for e in epsilons)} |")
    print("|---|---|---|" + "---|" * len(epsilons))
    for name, model, label, _, _, _, gains in rows:
        if gains[0] is not None:
            print(f"| {name} | {model} | {label} | " + " | ".join(f"{m:+.3f} ± {se:.3f}" for m, se in gains) + " |")


if __name__ == "__main__":
    main()
