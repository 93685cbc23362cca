"""The fourteen problems a default is chosen and judged on: the paper's four categorical data sets
and the ten of ``shared/datasets/corpus`` (101 to 67,557 rows, 2 to 26 classes).

Every problem is read as a categorical data set, as a device would report it: a column of numbers
with more than :data:`FEW_VALUES` distinct values falls into :data:`BINS` equal-width bins over its
range (the range a collection would declare; here the data's own, since no reporting is real), any
other column keeps its values as categories, and a missing value (``?``) is a category of its own.
A row with more or fewer fields than the header (wheat-seeds has 11 of 210) is left out.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from sim.datasets import Dataset, load_dataset, search_dirs

PAPER = ("car", "chess", "mushroom", "connect-4")
CORPUS = {  # file stem: columns that are not features (ids, sampling weights)
    "adult": ("fnlwgt",),
    "letter": (),
    "shuttle": (),
    "breast-cancer-ljubljana": (),
    "zoo": ("animal_name",),
    "monks1": (),
    "glass": (),
    "winequality-white": (),
    "wheat-seeds": (),
    "sonar": (),
}
PROBLEMS = (*PAPER, *CORPUS)
BINS = 4
FEW_VALUES = 8


def corpus_file(stem: str) -> Path:
    for folder in search_dirs():
        path = folder / "corpus" / f"{stem}.csv"
        if path.is_file():
            return path
    raise FileNotFoundError(f"{stem}.csv not found under corpus/ in any of {search_dirs()}")


def binned(column: pd.Series) -> np.ndarray:
    """The column as category labels: its values, or :data:`BINS` equal-width bins of its range."""
    values = pd.to_numeric(column, errors="coerce")
    numbers = values.notna()
    if not numbers.any() or values[numbers].nunique() <= FEW_VALUES or (~numbers & (column != "?")).any():
        return column.astype(str).to_numpy(dtype=object)
    low, high = values[numbers].min(), values[numbers].max()
    index = np.minimum(((values[numbers] - low) / (high - low) * BINS).astype(int), BINS - 1)
    out = np.full(len(column), "?", dtype=object)
    out[numbers.to_numpy()] = [f"bin{i}" for i in index]
    return out


@cache
def load_problem(name: str) -> Dataset:
    """Problem ``name`` of :data:`PROBLEMS` as a categorical :class:`~sim.datasets.Dataset`."""
    if name in PAPER:
        return load_dataset(name)
    frame = pd.read_csv(corpus_file(name), dtype=str, keep_default_na=False, on_bad_lines="skip")
    frame = frame.drop(columns=list(CORPUS[name]))
    features = frame.columns[:-1]
    X = np.column_stack([binned(frame[c].str.strip()) for c in features])
    y = frame[frame.columns[-1]].str.strip().to_numpy(dtype=object)
    return Dataset(name, X, y, tuple(features), frame.columns[-1])


def grid(cell, description: str):
    """The command line every per-problem grid shares (``--reps``, ``--central``, ``--problems``,
    ``--jobs``) parsed, and ``cell(problem, central, reps)`` run for every problem and central ε
    on ``--jobs`` processes: ``(args, centrals, problems, cells)``."""
    import argparse

    from joblib import Parallel, delayed

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--central", default="0.5,1,2")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    centrals = [float(x) for x in args.central.split(",")]
    problems = args.problems.split(",")
    cells = Parallel(n_jobs=args.jobs)(delayed(cell)(p, e, args.reps) for p in problems for e in centrals)
    return args, centrals, problems, cells
