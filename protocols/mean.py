"""Mean estimation of bounded vectors under ε-LDP (section 2.2.2 and 2.2.3 of the paper).

Inputs are float vectors of length ``dim`` with every coordinate in [-1, 1]. The aggregator's
estimate is the mean of the reports, an unbiased estimate of the mean input vector.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cached_property

import numpy as np

from . import exact
from .base import Mechanism, OracleState, check_epsilon
from .noise import (
    GRID,
    discrete_laplace,
    discrete_laplace_log_pmf,
    discrete_laplace_variance,
    grid_ratio,
    round_to_grid,
    sum_of_discrete_laplace,
)


def _check_vectors(values, dim: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != dim:
        raise ValueError(f"values must have shape (m, {dim}), got {values.shape}")
    if not np.isfinite(values).all() or (np.abs(values) > 1.0).any():
        raise ValueError("values must be finite and lie in [-1, 1]")
    return values


class LaplaceMean(Mechanism):
    """The Laplace mechanism of scale Δ/ε on every coordinate, where ``sensitivity`` Δ bounds the
    L1 distance between any two inputs the encoding can produce; released on a grid (see
    :mod:`protocols.noise`): each coordinate is rounded to the grid at random (unbiased), then
    ``GRID·K`` with ``K ~ DLap(exp(-ε·GRID/Δ))`` is added. For any two inputs the ratio of any
    output's probability is at most e^ε.

    For a class-hiding vector (the value at its class's position, zeros elsewhere) Δ = 2: two
    such vectors differ by at most |v| + |v'| <= 2 (different classes) or |v - v'| <= 2 (same
    class). For ``n`` such vectors reported together (Approach 1) Δ = 2n. Reports are float64
    arrays ``(m, dim)``.
    """

    name = "laplace"
    wire_kind = "floats"

    def __init__(self, epsilon: float, dim: int, sensitivity: float):
        self.epsilon = check_epsilon(epsilon)
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not sensitivity > 0:
            raise ValueError(f"sensitivity must be > 0, got {sensitivity!r}")
        self.dim = int(dim)
        self.sensitivity = float(sensitivity)

    def __repr__(self) -> str:
        return f"LaplaceMean(epsilon={self.epsilon}, dim={self.dim}, sensitivity={self.sensitivity})"

    @property
    def scale(self) -> float:
        """The Laplace scale Δ/ε."""
        return self.sensitivity / self.epsilon

    @property
    def r(self) -> float:
        return grid_ratio(self.epsilon, self.sensitivity)

    @property
    def state_size(self) -> int:
        return self.dim

    @property
    def wire_length(self) -> int:
        return self.dim

    @property
    def wire_bound(self) -> float:
        # An honest coordinate beyond 1 + 1000 scales has probability below e^-1000.
        return 1.0 + 1000.0 * self.scale

    @property
    def exact_rate(self) -> Fraction:
        """The device's noise rate ``ε·GRID/Δ`` as an exact rational."""
        return exact.grid_rate(self.epsilon, self.sensitivity, GRID)

    def perturb(self, values, rng) -> np.ndarray:
        values = _check_vectors(values, self.dim)
        if isinstance(rng, exact.ExactRandomness):
            noise = exact.discrete_laplace(rng, self.exact_rate, values.size).reshape(values.shape)
            return exact.round_to_grid(rng, values, GRID) + GRID * noise
        return round_to_grid(rng, values) + GRID * discrete_laplace(rng, self.r, values.shape)

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.asarray(reports, dtype=float).sum(axis=0)

    def simulate(self, values, rng) -> OracleState:
        """Exact: the summed grid-rounded inputs plus, per coordinate, a sum of n DLap draws (a
        difference of two negative binomials)."""
        values = _check_vectors(values, self.dim)
        n = values.shape[0]
        noise = GRID * sum_of_discrete_laplace(rng, self.r, n, self.dim)
        return OracleState(n, round_to_grid(rng, values).sum(axis=0) + noise)

    def estimate(self, state: OracleState) -> np.ndarray:
        """The mean report, shape ``(dim,)``; zeros when there are no reports."""
        return state.support / state.n if state.n else np.zeros(self.dim)

    def variance(self, n: int, true_counts=None) -> np.ndarray:
        """Upper bound on the variance of the noise in the mean of ``n`` reports, per coordinate:
        the grid noise (about ``2 (Δ/ε)²``) plus at most ``GRID²/4`` from the rounding, over ``n``."""
        per_report = GRID**2 * (discrete_laplace_variance(self.r) + 0.25)
        return np.full(self.dim, per_report / max(n, 1))

    def log_likelihood(self, reports: np.ndarray, value) -> np.ndarray:
        """Exact: per coordinate, the rounding's two grid points weighted by their probabilities,
        each convolved with the grid noise; ``-inf`` off the grid."""
        scaled = np.asarray(value, dtype=float) / GRID
        lower = np.floor(scaled)
        up = scaled - lower
        steps = np.asarray(reports, dtype=float) / GRID
        on_grid = np.isclose(steps, np.round(steps), rtol=0, atol=1e-6)
        k = np.round(steps)
        with np.errstate(divide="ignore"):
            p = (1 - up) * np.exp(discrete_laplace_log_pmf(k - lower, self.r)) + up * np.exp(
                discrete_laplace_log_pmf(k - lower - 1, self.r)
            )
            return np.where(on_grid, np.log(p), -np.inf).sum(axis=-1)


class OneBitMean(Mechanism):
    """Nguyen et al.'s one-bit mechanism (the paper's Approach 2).

    Pick a coordinate ``j`` uniformly; send ``u = 1`` with probability
    ``(v_j (e^ε - 1) + e^ε + 1) / (2 e^ε + 2)``; the report stands for the vector that is
    ``±(e^ε + 1)/(e^ε - 1) · dim`` at ``j`` (sign from ``u``) and 0 elsewhere, whose expectation
    is the input. Only ``(j, u)`` travels, as the integer ``2j + u``. For each ``j`` the two
    probabilities of ``u`` lie in ``[1/(e^ε+1), e^ε/(e^ε+1)]``, so the ratio is at most e^ε.
    """

    name = "onebit"
    wire_kind = "index"

    def __init__(self, epsilon: float, dim: int):
        self.epsilon = check_epsilon(epsilon)
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = int(dim)

    def __repr__(self) -> str:
        return f"OneBitMean(epsilon={self.epsilon}, dim={self.dim})"

    @property
    def magnitude(self) -> float:
        """``(e^ε + 1)/(e^ε - 1) · dim``, the size of the one non-zero coordinate."""
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1) * self.dim

    @property
    def state_size(self) -> int:
        return self.dim

    @property
    def wire_length(self) -> int:
        return 2 * self.dim

    def _p_one(self, v) -> np.ndarray:
        e = math.exp(self.epsilon)
        return (np.asarray(v) * (e - 1) + e + 1) / (2 * e + 2)

    @cached_property  # a certified bound of e^ε, computed once per mechanism
    def exact_bounds(self) -> tuple[int, int]:
        """``(lo, hi)``: the device's coin thresholds (over 2^64) are kept within them, with
        ``hi/lo <= E`` and ``(2^64 - lo)/(2^64 - hi) <= E`` for ``E <= e^ε``."""
        e = exact.exp_lower(Fraction(self.epsilon))
        return exact.threshold_up(1 / (e + 1)), exact.threshold_down(e / (e + 1))

    @cached_property
    def _slope(self) -> int:
        """``⌊c·2^64⌋`` for ``c = (E - 1)/(E + 1)``: the coin's slope in fixed point."""
        e = exact.exp_lower(Fraction(self.epsilon))
        return exact.threshold_down((e - 1) / (e + 1))

    def exact_thresholds(self, v) -> np.ndarray:
        """The device's coin thresholds for values ``v`` in [-1, 1]: ``u = 1`` with probability
        exactly ``T/2^64``, ``T`` within 3 of ``2^64·(1/2 + v·c/2)`` for ``c = (E - 1)/(E + 1)``,
        ``E <= e^ε``, and kept within :attr:`exact_bounds` (which is all the privacy needs).

        In fixed point, on integers of one size whatever the value: ``v`` becomes the 64-bit word
        ``X = ⌊v·2^62⌋ + 2^63`` (in [2^62, 3·2^62]; scaling a double by a power of two is exact),
        so the work does not depend on the value. An exact rational of ``v`` would take longer the
        more binary digits ``v`` has (0.123 longer than -0.75), and the draw's time would tell the value."""
        lo, hi = self.exact_bounds
        slope = self._slope
        offset = (1 << 63) - slope
        words = (np.ravel(np.asarray(v, dtype=float)) * 2.0**62).astype(np.int64).astype(np.uint64) + np.uint64(1 << 63)
        return np.array([min(hi, max(lo, offset + ((x * slope) >> 63))) for x in words.tolist()], dtype=object)

    def perturb(self, values, rng) -> np.ndarray:
        values = _check_vectors(values, self.dim)
        m = values.shape[0]
        j = np.asarray(rng.integers(0, self.dim, size=m), dtype=np.int64)
        chosen = values[np.arange(m), j]
        if isinstance(rng, exact.ExactRandomness):
            u = exact.coins(rng, self.exact_thresholds(chosen), m)
        else:
            u = rng.random(m) < self._p_one(chosen)
        return 2 * j + u

    def support(self, reports: np.ndarray) -> np.ndarray:
        reports = np.asarray(reports, dtype=np.int64)
        signs = np.where(reports % 2 == 1, self.magnitude, -self.magnitude)
        return np.bincount(reports // 2, weights=signs, minlength=self.dim).astype(float)

    def sparse_support(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reports = np.asarray(reports, dtype=np.int64)
        cells, where = np.unique(reports // 2, return_inverse=True)
        signs = np.where(reports % 2 == 1, self.magnitude, -self.magnitude)
        return cells, np.bincount(where, weights=signs, minlength=len(cells)).astype(float)

    def estimate(self, state: OracleState) -> np.ndarray:
        """The mean report vector, shape ``(dim,)``; zeros when there are no reports."""
        return state.support / state.n if state.n else np.zeros(self.dim)

    def variance(self, n: int, true_counts=None) -> np.ndarray:
        """Upper bound on the variance of the mean of ``n`` reports, per coordinate:
        ``magnitude² / dim / n`` (the second moment of one report's coordinate)."""
        return np.full(self.dim, self.magnitude**2 / self.dim / max(n, 1))

    def log_likelihood(self, reports: np.ndarray, value) -> np.ndarray:
        reports = np.asarray(reports, dtype=np.int64)
        p = self._p_one(np.asarray(value, dtype=float)[reports // 2])
        return np.log(np.where(reports % 2 == 1, p, 1 - p)) - math.log(self.dim)
