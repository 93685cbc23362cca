"""Accuracy on the continuous data sets: the settings of the paper's figures 3 and 4.

    python bench/continuous.py [--reps 20] [--eps 0.5,1,2,4]

Figure 3: discretisation (DE and OUE) of the original features, PCA and DCA to one component
(Diabetes with PCA: six components, as the paper found best). Figure 4: Gaussian NB with
approaches 1-3 on the original features, PCA and DCA (one component). One report per person,
default estimator. Prints Markdown tables; projections are fitted on the training split, as in the
paper (a real collection fits them on a separate reference sample).
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from sim.datasets import load_dataset
from sim.experiment import Setup, run_once

REDUCTIONS = {"original": (None, None), "PCA": ("pca", 1), "DCA": ("dca", 1)}


def cell(data, protocol, eps, setup, reps):
    runs = [run_once(data, protocol, eps, seed, ("normsub",), setup=setup) for seed in range(reps)]
    return np.mean([r.accuracy["normsub"] for r in runs]), np.mean([r.nonprivate_accuracy for r in runs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    args = parser.parse_args()
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
        rows.append((name, model, label, [v[0] for v in values], values[-1][1]))
    print(f"| data set | model | features | {' | '.join(f'ε={e:g}' for e in epsilons)} | non-private |")
    print("|---|---|---|" + "---|" * len(epsilons) + "---|")
    for name, model, label, accs, nonprivate in rows:
        print(f"| {name} | {model} | {label} | " + " | ".join(f"{a:.3f}" for a in accs) + f" | {nonprivate:.3f} |")


if __name__ == "__main__":
    main()
