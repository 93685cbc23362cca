"""The projection every estimator shares: noisy estimates onto the counts they can be."""

from __future__ import annotations

import numpy as np


def project_to_simplex(estimate: np.ndarray, total: float) -> np.ndarray:
    """The closest vector (Euclidean) to ``estimate`` with non-negative entries summing to ``total``.

    This equals Norm-Sub: subtract one constant δ from every entry and clip at zero, with δ chosen
    so the result sums to ``total``. Returns zeros when ``total`` is 0.
    """
    estimate = np.asarray(estimate, dtype=float)
    if total <= 0:
        return np.zeros_like(estimate)
    ordered = np.sort(estimate)[::-1]
    cumulative = np.cumsum(ordered) - total
    ranks = np.arange(1, estimate.size + 1)
    # Largest r with ordered[r-1] > (cumsum_r - total) / r: those entries stay positive.
    r = np.flatnonzero(ordered * ranks > cumulative)[-1] + 1
    delta = cumulative[r - 1] / r
    return np.maximum(estimate - delta, 0.0)
