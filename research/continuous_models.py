"""Which model for continuous features: the binned discrete model against Gaussian NB with
approaches 1, 2 and 3, on every continuous data set at hand.

    python research/continuous_models.py [--reps 20] [--eps 0.5,1,2,4] [--jobs 2]

The data sets: the paper's two (Australian, Diabetes, with their declared ranges) and the six
continuous sets of ``shared/datasets/corpus`` (letter, shuttle, sonar, wheat-seeds, glass,
winequality-white: every column numeric, ranges the data's own, as a bench may). Original features,
no reduction; the discrete model bins each into the simulator's default bins with protocol
``auto``; the Gaussian approaches report with DE. ``--reps`` paired runs per cell (the same splits
for every model), fast mode, the default estimator; beside the best constant classifier on the test
rows. Writes ``research/results/continuous_models.md``: accuracy per cell, then per ε the model that
is best on most data sets, and each model's mean paired gain over the discrete one.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from problems import corpus_file

RESULTS = Path(__file__).with_name("results") / "continuous_models.md"
CORPUS = {"letter": (), "shuttle": (), "sonar": (), "wheat-seeds": (), "glass": (), "winequality-white": ()}
MODELS = ("discrete", "gaussian A1", "gaussian A2", "gaussian A3")


def load(name: str):
    """The continuous :class:`~sim.datasets.Dataset` ``name``: a paper set, or a corpus set with the data's own ranges."""
    from sim.datasets import Dataset, load_dataset

    if name in ("australian", "diabetes"):
        return load_dataset(name)
    frame = pd.read_csv(corpus_file(name), on_bad_lines="skip").dropna()
    features = [c for c in frame.columns[:-1] if c not in CORPUS[name]]
    X = frame[features].to_numpy(dtype=float)
    ranges = tuple((float(lo), float(hi) if hi > lo else float(lo) + 1.0) for lo, hi in zip(X.min(axis=0), X.max(axis=0)))
    y = frame[frame.columns[-1]].astype(str).to_numpy(dtype=object)
    return Dataset(name, X, y, tuple(features), frame.columns[-1], ranges)


def setup_of(model: str):
    from sim.experiment import Setup

    return Setup("discrete") if model == "discrete" else Setup("gaussian", None, None, None, int(model[-1]))


def cell(name: str, epsilon: float, reps: int) -> list[dict]:
    """Every model's accuracy on ``reps`` paired runs of one (data set, ε)."""
    warnings.simplefilter("ignore")
    from sim.experiment import run_once

    data = load(name)
    rows = []
    for seed in range(reps):
        row = {"data set": name, "eps": epsilon, "seed": seed, "people": None}
        for model in MODELS:
            protocol = "auto" if model == "discrete" else "DE"
            result = run_once(data, protocol, epsilon, seed, ("normsub",), setup=setup_of(model), mode="fast")
            row[model], row["best constant"], row["people"] = result.accuracy["normsub"], result.majority_accuracy, result.n_train
        rows.append(row)
    return rows


def report(runs: pd.DataFrame, reps: int, eps: str) -> str:
    lines = [
        f"# Continuous features: binned or Gaussian (`python research/continuous_models.py --reps {reps} --eps {eps}`)",
        "",
        f"Mean test accuracy over {reps} paired runs (original features, fast mode, the default estimator); "
        "**bold**: the best model of the cell.",
        "",
        "| data set | people | ε | " + " | ".join(MODELS) + " | best constant |",
        "|---|---|---|" + "---|" * (len(MODELS) + 1),
    ]
    for (name, epsilon), x in runs.groupby(["data set", "eps"], sort=False):
        means = [x[m].mean() for m in MODELS]
        best = int(np.argmax(means))
        shown = [f"**{v:.3f}**" if i == best else f"{v:.3f}" for i, v in enumerate(means)]
        lines.append(f"| {name} | {int(x['people'].iloc[0]):,} | {epsilon:g} | " + " | ".join(shown) + f" | {x['best constant'].mean():.3f} |")
    lines += ["", "Per ε: on how many data sets each model is best, and its mean paired gain over the discrete model (± standard error over the data sets' cells).", ""]
    lines += ["| ε | " + " | ".join(MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    for epsilon, x in runs.groupby("eps"):
        cells = x.groupby("data set")[list(MODELS)].mean()
        wins = cells.to_numpy().argmax(axis=1)
        parts = []
        for i, model in enumerate(MODELS):
            gains = (x[model] - x["discrete"]).groupby(x["data set"])
            mean = gains.mean()
            se = np.sqrt((gains.var(ddof=1) / gains.count()).sum()) / len(mean)
            gain = "" if model == "discrete" else f", {mean.mean():+.3f} ± {se:.3f}"
            parts.append(f"{int((wins == i).sum())} of {len(cells)}{gain}")
        lines.append(f"| {epsilon:g} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--eps", default="0.5,1,2,4")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    names = ["australian", "diabetes", *CORPUS]
    cells = [(n, float(e)) for n in names for e in args.eps.split(",")]
    parts = Parallel(n_jobs=args.jobs)(delayed(cell)(n, e, args.reps) for n, e in cells)
    runs = pd.DataFrame([row for part in parts for row in part])
    text = report(runs, args.reps, args.eps)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
