"""The projection every estimator shares: noisy estimates onto the counts they can be."""

from __future__ import annotations

import numpy as np


def project_to_simplex(estimate: np.ndarray, total) -> np.ndarray:
    """The closest vector (Euclidean) to ``estimate`` (shape ``(..., d)``) with non-negative entries
    summing to ``total`` (a number, or one per leading index: shape ``(...)``), row by row.

    This equals Norm-Sub: subtract one constant δ from every entry and clip at zero, with δ chosen
    so the result sums to ``total``. Returns zeros where ``total`` is 0.
    """
    estimate = np.asarray(estimate, dtype=float)
    total = np.asarray(total, dtype=float)[..., None]
    ordered = -np.sort(-estimate, axis=-1)
    cumulative = np.cumsum(ordered, axis=-1) - total
    ranks = np.arange(1, estimate.shape[-1] + 1)
    # Largest r with ordered[r-1] > (cumsum_r - total) / r: those entries stay positive.
    stays = ordered * ranks > cumulative
    r = estimate.shape[-1] - np.argmax(stays[..., ::-1], axis=-1, keepdims=True)
    delta = np.take_along_axis(cumulative, r - 1, axis=-1) / r
    return np.where(total > 0, np.maximum(estimate - delta, 0.0), 0.0)
