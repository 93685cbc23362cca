"""Checks every frequency oracle must pass, written as functions returning numbers so that tests
can also show that deliberately broken oracles fail them."""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

from protocols import FrequencyOracle, UnaryEncoding
from protocols.histogram import _HistogramPerturbation
from protocols.noise import GRID, discrete_laplace_sf


def discrete_laplace_pvalue(noise: np.ndarray, r: float) -> float:
    """p-value that ``noise`` is GRID·DLap(r): chi-square over bins of the grid steps (0 if any
    value is off the grid)."""
    steps = noise / GRID
    if not np.array_equal(steps, np.round(steps)):
        return 0.0
    scale = 1 / (1 - r)  # about the Laplace scale in grid steps
    edges = np.round(np.array([-3, -1.5, -0.7, -0.25, 0, 0.25, 0.7, 1.5, 3]) * scale)
    # Bin j holds the steps k with edges[j-1] < k <= edges[j] (first and last bins unbounded).
    below = 1 - discrete_laplace_sf(edges + 1, r)  # P(K <= edge)
    expected = np.diff(np.concatenate([[0.0], below, [1.0]])) * len(steps)
    observed = np.bincount(np.searchsorted(edges, steps, side="left"), minlength=len(edges) + 1)
    return float(stats.chisquare(observed, expected).pvalue)


def output_space(oracle: FrequencyOracle) -> np.ndarray:
    """Every possible report for discrete protocols; for histogram encoding a grid of vectors that
    contains the worst case (components below 0 and above 1)."""
    d = oracle.domain_size
    if isinstance(oracle, UnaryEncoding):
        return np.array(list(itertools.product([False, True], repeat=d)))
    if isinstance(oracle, _HistogramPerturbation):
        grid = [-1.5, -0.25, 0.0, 0.3125, 0.5, 1.0, 1.25, 2.5]  # points of the release grid
        return np.array(list(itertools.product(grid, repeat=d)))
    return np.arange(d)


def worst_log_ratio(oracle: FrequencyOracle) -> float:
    """max over inputs v1, v2 and outputs o of log Pr[o | v1] - log Pr[o | v2]."""
    outputs = output_space(oracle)
    ll = np.stack([oracle.log_likelihood(outputs, v) for v in range(oracle.domain_size)])
    return float((ll.max(axis=0) - ll.min(axis=0)).max())


def sampling_pvalue(oracle: FrequencyOracle, value: int, n: int = 40_000, seed: int = 1) -> float:
    """p-value that ``perturb`` samples from ``log_likelihood`` for one input value: chi-square
    over all outputs for discrete reports, Kolmogorov-Smirnov on the noise for histogram encoding."""
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(np.full(n, value), rng)
    if isinstance(oracle, _HistogramPerturbation):
        noise = reports.copy()
        noise[:, value] -= 1.0
        return discrete_laplace_pvalue(noise.ravel(), oracle.r)
    outputs = output_space(oracle)
    expected = np.exp(oracle.log_likelihood(outputs, value)) * n
    if isinstance(oracle, UnaryEncoding):
        index = reports.astype(np.int64) @ (1 << np.arange(oracle.domain_size)[::-1])
    else:
        index = reports
    observed = np.bincount(index, minlength=len(outputs))
    return float(stats.chisquare(observed, expected).pvalue)


TRUE_COUNTS = np.array([9000, 5000, 3000, 2000, 1000, 0])


def estimate_z_scores(oracle: FrequencyOracle, seed: int = 2) -> np.ndarray:
    """(estimate - truth) / sqrt(variance) per value, for a population with :data:`TRUE_COUNTS`."""
    values = np.repeat(np.arange(len(TRUE_COUNTS)), TRUE_COUNTS)
    state = oracle.aggregate(oracle.perturb(values, np.random.default_rng(seed)))
    variance = oracle.variance(len(values), TRUE_COUNTS)
    return (oracle.estimate(state) - TRUE_COUNTS) / np.sqrt(variance)


def empirical_variance_ratio(oracle: FrequencyOracle, repeats: int = 300, seed: int = 3) -> np.ndarray:
    """Empirical variance of the estimate over independent populations divided by the formula,
    per value, for a population of 2,000 with counts proportional to :data:`TRUE_COUNTS`."""
    counts = TRUE_COUNTS // 10
    values = np.repeat(np.arange(len(counts)), counts)
    rng = np.random.default_rng(seed)
    estimates = np.array([oracle.estimate(oracle.aggregate(oracle.perturb(values, rng))) for _ in range(repeats)])
    return estimates.var(axis=0, ddof=1) / oracle.variance(len(values), counts)
