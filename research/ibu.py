"""Iterative Bayesian Update against normsub's Norm-Sub histograms, for DE.

    python research/ibu.py REPS

Convergence on a known model (DE, ε = 1, 10 seeds per size: mean largest conditional error), then
accuracy on car, chess and mushroom with DE (fast mode, REPS paired seeds): normsub / ibu and the
paired difference. (connect-4 is left out: EM's convergence near empty cells makes it slow there.)
"""

import sys

import numpy as np

from aggregator import build_model
from participant import CollectionSpec, Feature
from sim.datasets import load_dataset
from sim.experiment import run_once
from sim.synthetic import known_model_statistics, largest_conditional_error

reps = int(sys.argv[1])
prior = np.array([0.3, 0.7])
conds = [np.random.default_rng(0).dirichlet(np.ones(d), size=2) for d in (4, 4, 6)]
spec = CollectionSpec([Feature(f"f{i}", [str(j) for j in range(t.shape[1])]) for i, t in enumerate(conds)], ["a", "b"], "DE", 1.0)
for n in (1000, 10_000, 100_000, 1_000_000):
    e = {k: [] for k in ("paper", "normsub", "ibu")}
    for seed in range(10):
        st = known_model_statistics(spec, prior, conds, n, np.random.default_rng(seed + 1))
        for k in e:
            m = build_model(st, k)
            e[k].append(largest_conditional_error(m, conds))
    print(n, {k: round(float(np.mean(v)), 4) for k, v in e.items()}, flush=True)
for name in ("car", "chess", "mushroom"):
    data = load_dataset(name)
    cells = []
    for eps in (0.5, 1, 2, 4):
        runs = [run_once(data, "DE", eps, s, ("paper", "normsub", "ibu"), mode="fast") for s in range(reps)]
        d = np.array([r.accuracy["ibu"] - r.accuracy["normsub"] for r in runs])
        cells.append(f"{np.mean([r.accuracy['normsub'] for r in runs]):.3f}/{np.mean([r.accuracy['ibu'] for r in runs]):.3f} ({d.mean():+.3f}±{d.std(ddof=1)/np.sqrt(reps):.3f})")
    print(name, "DE", " ".join(cells), flush=True)
