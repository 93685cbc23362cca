"""Laplace responses of the companion papers, in the form that is provably ε-DP here."""

from __future__ import annotations

import numpy as np

CLAMP = 1e-5  # L+ of comparing-dp-classifiers: responses that must be positive are clamped here

# Adjacent data sets differ in one row (replacement). A row then leaves one cell of a histogram
# and enters another: the histogram's L1 sensitivity is 2, so each noisy histogram takes
# Laplace(2/ε'). (The papers state sensitivity 1, which holds for add/remove adjacency only.)
HISTOGRAM_SENSITIVITY = 2.0


def noisy_histogram(counts: np.ndarray, epsilon: float | None, rng, positive: bool = True) -> np.ndarray:
    """``counts`` plus Laplace(2/ε) per cell (ε-DP for the whole histogram), clamped at
    :data:`CLAMP` if ``positive``; the exact counts when ``epsilon`` is None (non-private)."""
    counts = np.asarray(counts, dtype=float)
    if epsilon is None:
        return np.maximum(counts, CLAMP) if positive else counts
    noisy = counts + rng.laplace(0.0, HISTOGRAM_SENSITIVITY / epsilon, counts.shape)
    return np.maximum(noisy, CLAMP) if positive else noisy
