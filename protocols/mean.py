"""Mean estimation of bounded vectors under ε-LDP (section 2.2.2 and 2.2.3 of the paper).

Inputs are float vectors of length ``dim`` with every coordinate in [-1, 1]. The aggregator's
estimate is the mean of the reports, an unbiased estimate of the mean input vector.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Mechanism, OracleState, check_epsilon
from .noise import laplace, laplace_log_density


def _check_vectors(values, dim: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != dim:
        raise ValueError(f"values must have shape (m, {dim}), got {values.shape}")
    if not np.isfinite(values).all() or (np.abs(values) > 1.0).any():
        raise ValueError("values must be finite and lie in [-1, 1]")
    return values


class LaplaceMean(Mechanism):
    """Add Laplace(Δ/ε) noise to every coordinate, where ``sensitivity`` Δ bounds the L1 distance
    between any two inputs the encoding can produce.

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
    def state_size(self) -> int:
        return self.dim

    @property
    def wire_length(self) -> int:
        return self.dim

    @property
    def wire_bound(self) -> float:
        # An honest coordinate beyond 1 + 1000 scales has probability below e^-1000.
        return 1.0 + 1000.0 * self.scale

    def perturb(self, values, rng) -> np.ndarray:
        values = _check_vectors(values, self.dim)
        return values + laplace(rng, self.scale, values.shape)

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.asarray(reports, dtype=float).sum(axis=0)

    def simulate(self, values, rng) -> OracleState:
        """Exact: the summed inputs plus, per coordinate, a sum of n Laplace draws (a difference of
        two Gamma(n, scale) draws)."""
        values = _check_vectors(values, self.dim)
        n = values.shape[0]
        if n == 0:
            return OracleState.empty(self.dim)
        noise = rng.gamma(n, self.scale, self.dim) - rng.gamma(n, self.scale, self.dim)
        return OracleState(n, values.sum(axis=0) + noise)

    def estimate(self, state: OracleState) -> np.ndarray:
        """The mean report, shape ``(dim,)``; zeros when there are no reports."""
        return state.support / state.n if state.n else np.zeros(self.dim)

    def variance(self, n: int, true_counts=None) -> np.ndarray:
        """Variance of the noise in the mean of ``n`` reports: ``2 (Δ/ε)² / n`` per coordinate."""
        return np.full(self.dim, 2.0 * self.scale**2 / max(n, 1))

    def log_likelihood(self, reports: np.ndarray, value) -> np.ndarray:
        return laplace_log_density(np.asarray(reports, dtype=float) - np.asarray(value, dtype=float), self.scale).sum(
            axis=-1
        )


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

    def perturb(self, values, rng) -> np.ndarray:
        values = _check_vectors(values, self.dim)
        m = values.shape[0]
        j = np.asarray(rng.integers(0, self.dim, size=m), dtype=np.int64)
        u = rng.random(m) < self._p_one(values[np.arange(m), j])
        return 2 * j + u

    def support(self, reports: np.ndarray) -> np.ndarray:
        reports = np.asarray(reports, dtype=np.int64)
        signs = np.where(reports % 2 == 1, self.magnitude, -self.magnitude)
        return np.bincount(reports // 2, weights=signs, minlength=self.dim).astype(float)

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
