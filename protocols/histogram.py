"""Histogram encodings: summation (SHE) and thresholding (THE).

Both share the participant's side: encode value ``v`` as a length-``d`` one-hot vector of floats and
add independent Laplace(2/ε) noise to every component. Two values' vectors differ by 2 in L1
norm, so the density ratio is at most ``e^{ε·2/2} = e^ε``. They differ only in what the
aggregator counts, which is post-processing and costs no privacy.
"""

from __future__ import annotations

import math

import numpy as np

from .base import FrequencyOracle, OracleState, PureOracle
from .noise import laplace, laplace_log_density


class _HistogramPerturbation:
    """Participant side of histogram encoding; reports are float64 arrays of shape ``(m, d)``."""

    epsilon: float
    domain_size: int
    wire_kind = "floats"

    @property
    def scale(self) -> float:
        """Laplace scale ``b = 2/ε`` (L1 sensitivity 2 of the one-hot vector)."""
        return 2.0 / self.epsilon

    @property
    def wire_bound(self) -> float:
        # Beyond 1 + 1000 scales an honest report has a component with probability < d·e^-1000.
        return 1.0 + 1000.0 * self.scale

    def perturb(self, values, rng) -> np.ndarray:
        values = self._check_values(values)
        m = values.shape[0]
        reports = laplace(rng, self.scale, (m, self.domain_size))
        reports[np.arange(m), values] += 1.0
        return reports

    def log_likelihood(self, reports: np.ndarray, value: int) -> np.ndarray:
        reports = np.asarray(reports, dtype=float)
        onehot = np.zeros(self.domain_size)
        onehot[value] = 1.0
        return laplace_log_density(reports - onehot, self.scale).sum(axis=-1)


class SummationHistogramEncoding(_HistogramPerturbation, FrequencyOracle):
    """SHE: the estimate of value ``i``'s count is the sum of the reports' ``i``-th components."""

    name = "SHE"

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.asarray(reports, dtype=float).sum(axis=0)

    def estimate(self, state) -> np.ndarray:
        return state.support.copy()

    def simulate_counts(self, counts, rng) -> OracleState:
        """Exact: component i sums n_i ones and n Laplace(b) draws; a sum of n Laplace(b) is the
        difference of two Gamma(n, b) draws."""
        counts = np.asarray(counts, dtype=np.int64)
        n = int(counts.sum())
        if n == 0:
            return OracleState.empty(self.domain_size)
        noise = rng.gamma(n, self.scale, self.domain_size) - rng.gamma(n, self.scale, self.domain_size)
        return OracleState(n, counts + noise)

    def variance(self, n: int, true_counts=None) -> np.ndarray:
        # Each report adds one Laplace(b) draw of variance 2b² to every component.
        return np.full(self.domain_size, n * 2.0 * self.scale**2)


class ThresholdHistogramEncoding(_HistogramPerturbation, PureOracle):
    """THE: the aggregator counts a component as supporting its value when it exceeds θ.

    With Laplace(b), b = 2/ε, ``p = Pr[1 + L > θ] = 1 - ½·e^{-(1-θ)ε/2}`` and
    ``q = Pr[L > θ] = ½·e^{-θε/2}`` for θ in (0, 1). (The paper's text prints
    ``p = 1 - ½·e^{ε(1-θ)/2}``, which is negative: a sign slip.) The paper's experiments use θ = 0.25.
    """

    name = "THE"

    def __init__(self, epsilon: float, domain_size: int, theta: float = 0.25):
        super().__init__(epsilon, domain_size)
        if not 0.0 < theta < 1.0:
            raise ValueError(f"theta must lie in (0, 1), got {theta!r}")
        self.theta = float(theta)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.domain_size}, theta={self.theta})"

    @property
    def p(self) -> float:
        return 1.0 - 0.5 * math.exp(-(1.0 - self.theta) * self.epsilon / 2.0)

    @property
    def q(self) -> float:
        return 0.5 * math.exp(-self.theta * self.epsilon / 2.0)

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.count_nonzero(np.asarray(reports) > self.theta, axis=0).astype(float)
