"""How noisy an input's count estimates are, at the counts the reports estimate.

An oracle's variance for a cell depends on how many people hold it: a DE cell held by everyone
varies with ``p(1 − p)``, an empty one with ``q(1 − q)``. Wang et al. compare protocols at empty
cells, which understates the variance of held cells by up to 40 % at small domains (DE, d = 4).
Every weight and test here takes the variance at the plug-in counts instead: the unbiased
estimates, clipped to [0, n]. Post-processing of the aggregated statistics: no privacy is spent.
"""

from __future__ import annotations

import numpy as np


def cell_variances(oracle, n: int, counts: np.ndarray) -> np.ndarray:
    """The variance of each cell's count estimate from ``n`` reports when the cells hold ``counts``
    (clipped to [0, n]); the shape of ``counts``."""
    return oracle.variance(max(n, 1), np.clip(np.asarray(counts, dtype=float), 0.0, max(n, 1)))


def class_cell_variances(oracle, n: int, counts: np.ndarray, k: int) -> np.ndarray:
    """The mean of :func:`cell_variances` over each class's cells (joint index ``a·k + c``), shape ``(k,)``."""
    return cell_variances(oracle, n, counts).reshape(-1, k).mean(axis=0)


def sampled_cell_variances(oracle, n: int, counts: np.ndarray) -> np.ndarray:
    """:func:`cell_variances` plus the multinomial variance of the cells' true counts among ``n``
    people drawn from a population (``t·(1 − t/n)`` at the clipped counts ``t``): the noise of a
    cell's estimate as a statement about the population rather than about these ``n`` people."""
    held = np.clip(np.asarray(counts, dtype=float), 0.0, max(n, 1))
    return cell_variances(oracle, n, counts) + held * (1 - held / max(n, 1))
