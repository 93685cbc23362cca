"""Noise samplers built only on ``rng.random``, so a secure uniform source can drive them.

Reports that carry real numbers are released on a grid (Mironov 2012): textbook floating-point
Laplace noise leaks through the set of doubles an output can take, which depends on the input.
Here values are first rounded to the grid ``GRID`` at random (unbiased), then discrete Laplace
noise, an integer multiple of the grid, is added. Every input can produce every grid point, and
for inputs on the grid at L1 distance at most Δ (in value units) the probability ratio of any
output is at most ``exp(ε)`` exactly when the noise is ``DLap(r)`` with ``r = exp(-ε·GRID/Δ)``.
The sampler draws the geometric parts by inverting a uniform double, so the probabilities it
realises agree with the ideal ones to double precision; no output is impossible for one input and
possible for another.
"""

from __future__ import annotations

import math

import numpy as np

GRID = 2.0**-10


def grid_ratio(epsilon: float, sensitivity: float) -> float:
    """``r = exp(-ε·GRID/Δ)``: the discrete Laplace parameter for ε and L1 sensitivity Δ."""
    return math.exp(-epsilon * GRID / sensitivity)


def geometric(rng, r: float, size) -> np.ndarray:
    """Geometric draws on {0, 1, ...} with ``P(g) = (1 - r) r^g``; int64."""
    u = 1.0 - rng.random(size)  # in (0, 1]
    return np.floor(np.log(u) / math.log(r)).astype(np.int64)


def discrete_laplace(rng, r: float, size) -> np.ndarray:
    """Integers with ``P(k) = (1 - r)/(1 + r) · r^|k|``: a difference of two geometric draws."""
    return geometric(rng, r, size) - geometric(rng, r, size)


def discrete_laplace_log_pmf(k, r: float) -> np.ndarray:
    return math.log((1 - r) / (1 + r)) + np.abs(k) * math.log(r)


def discrete_laplace_sf(m, r: float) -> np.ndarray:
    """``P(K >= m)`` for integer ``m``."""
    m = np.asarray(m, dtype=float)
    return np.where(m >= 1, r**m / (1 + r), 1 - r ** (1 - m) / (1 + r))


def discrete_laplace_variance(r: float) -> float:
    """Variance of ``K``: ``2r / (1 - r)²`` (in grid units)."""
    return 2 * r / (1 - r) ** 2


def sum_of_discrete_laplace(rng, r: float, n, size) -> np.ndarray:
    """The sum of ``n`` independent DLap(r) draws, per element of ``size`` (int64), exactly: a sum
    of ``n`` geometric draws is negative binomial, so the sum is a difference of two of them.
    ``n`` is a count or an array of counts broadcasting to ``size``; a count of 0 sums to 0."""
    n = np.asarray(n, dtype=np.int64)
    if not n.any():
        return np.zeros(size, dtype=np.int64)
    # numpy's negative binomial wants n > 0: draw with 1 where n is 0 and discard those draws.
    m = np.maximum(n, 1)
    draws = rng.negative_binomial(m, 1 - r, size) - rng.negative_binomial(m, 1 - r, size)
    return np.where(n > 0, draws, 0)


def round_to_grid(rng, values) -> np.ndarray:
    """Each value moved to one of its two neighbouring grid points, the upper one with probability
    equal to the distance from the lower (so the expectation is unchanged); values already on the
    grid stay put."""
    scaled = np.asarray(values, dtype=float) / GRID
    lower = np.floor(scaled)
    up = rng.random(scaled.shape) < (scaled - lower)
    return (lower + up) * GRID


def grid_log_likelihood(outputs, centre, r: float) -> np.ndarray:
    """Log-probability of grid ``outputs`` given grid ``centre`` under per-coordinate DLap(r)
    noise, summed over the last axis; ``-inf`` for an output off the grid."""
    steps = (np.asarray(outputs, dtype=float) - np.asarray(centre, dtype=float)) / GRID
    on_grid = np.isclose(steps, np.round(steps), rtol=0, atol=1e-6)
    logp = np.where(on_grid, discrete_laplace_log_pmf(np.round(steps), r), -np.inf)
    return logp.sum(axis=-1)
