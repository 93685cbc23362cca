"""What the estimator experiments in research/ share: their command line (``--reps``, ``--cells``,
``--jobs``), running one function per (data set, ε) cell in parallel processes, and the paired
difference as the tables print it. Each cell repeats the seeds of ``bench/estimators.py`` (the
same splits and reports), so every table pairs with its runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
ALL_CELLS = ",".join(f"{d}:{e:g}" for d in ("car", "chess", "mushroom", "connect-4") for e in (0.5, 1, 2, 4))


def cell_parser(doc: str, cells: str = ALL_CELLS) -> argparse.ArgumentParser:
    """An argument parser with ``--reps`` (default 100), ``--cells`` (``data set:ε``,
    comma-separated) and ``--jobs`` (worker processes, default 2); a script adds its own."""
    parsed = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parsed.add_argument("--reps", type=int, default=100, help="paired repetitions (seeds 0, 1, …) per cell")
    parsed.add_argument("--cells", default=cells, help="data set:ε, comma-separated")
    parsed.add_argument("--jobs", type=int, default=2, help="worker processes")
    return parsed


def run_cells(cell: Callable, args: argparse.Namespace, *extra) -> list:
    """``cell(dataset, ε, reps, *extra)`` for every cell of ``args.cells``, ``args.jobs`` at a
    time, with a progress bar; the results in the cells' order."""
    cells = [(c.split(":")[0], float(c.split(":")[1])) for c in args.cells.split(",")]
    runs = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(cell)(d, e, args.reps, *extra) for d, e in cells)
    return list(tqdm(runs, total=len(cells), desc="cells"))


def cell_dataset(name: str):
    """The data set a cell names: a built-in one (``car``), or ``name@share``, a subsample whose most
    common class holds ``share`` of the rows (every row of that class kept, the others drawn without
    replacement, seed 0), with the data set's declared domain: uneven classes the built-in data
    sets do not have beside many weak features (``mushroom@0.75``)."""
    from sim.datasets import load_dataset

    base, _, share = name.partition("@")
    data = load_dataset(base)
    if not share:
        return data
    labels, counts = np.unique(data.y, return_counts=True)
    top = np.flatnonzero(data.y == labels[counts.argmax()])
    rest = np.flatnonzero(data.y != labels[counts.argmax()])
    wanted = min(len(rest), round(len(top) * (1 - float(share)) / float(share)))
    rest = np.random.default_rng(0).choice(rest, size=wanted, replace=False)
    return data.rows(np.sort(np.concatenate([top, rest])))


def probed_runs(data, epsilon: float, seeds, found: list[dict]) -> list[dict]:
    """Per seed (protocol ``auto``, fast mode), the record the estimator registered as ``probe``
    appended to ``found`` for that run, with the test accuracy of ``normsub``, of ``prior only``
    and of the majority class (``normsub``, ``prior``, ``majority``)."""
    from sim.experiment import run_once

    runs = []
    for seed in seeds:
        result = run_once(data, "auto", epsilon, seed, ("probe", "normsub", "prior only"), mode="fast")
        accuracy = {"normsub": result.accuracy["normsub"], "prior": result.accuracy["prior only"]}
        runs.append(found[-1] | accuracy | {"majority": result.majority_accuracy})
    return runs


def paired(a: np.ndarray) -> str:
    """The mean of paired differences ``a`` ± its standard error, as ``+0.012 ± 0.003``."""
    return f"{a.mean():+.3f} ± {a.std(ddof=1) / np.sqrt(len(a)):.3f}"


def cached(path: Path, reps: int, compute: Callable[[int], pd.DataFrame]) -> pd.DataFrame:
    """The first ``reps`` runs kept at ``path`` (a CSV, one run a row), or ``compute(reps)``'s,
    kept there: a study re-run with as many runs or fewer only rewrites its tables."""
    if path.is_file():
        runs = pd.read_csv(path)
        if len(runs) >= reps:
            return runs.iloc[:reps]
    runs = compute(reps)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(path, index=False)
    return runs
