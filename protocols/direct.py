"""Direct encoding (DE), also called generalised randomised response."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from functools import cached_property

import numpy as np

from .base import PureOracle
from .exact import ExactRandomness, coins, exp_lower, threshold_down

# Up to this many reports, sparse_support counts in Python (a few µs) rather than with np.unique (15 µs).
SMALL = 32


class DirectEncoding(PureOracle):
    """Report the true value with probability ``p = e^ε / (e^ε + d - 1)``, otherwise one of the
    other ``d - 1`` values uniformly (each with ``q = 1 / (e^ε + d - 1)``); ``p / q = e^ε``.

    Reports are integers in ``[0, d)``, shape ``(m,)``.
    """

    name = "DE"
    wire_kind = "index"

    @property
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.domain_size - 1)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + self.domain_size - 1)

    @cached_property  # a certified bound of e^ε, computed once per mechanism
    def exact_keep_threshold(self) -> int:
        """The device's keep coin: true with probability exactly ``T/2^64``, ``T`` rounded down
        from ``E/(E + d - 1)`` with ``E <= e^ε``; each other value then has ``(1 - T/2^64)/(d - 1)``,
        so the realised ratio is at most ``E``."""
        e = exp_lower(Fraction(self.epsilon))
        return threshold_down(e / (e + self.domain_size - 1))

    def perturb(self, values, rng) -> np.ndarray:
        values = self._check_values(values)
        m = values.shape[0]
        # An index among the other d-1 values, shifted past the true one.
        other = rng.integers(0, self.domain_size - 1, size=m)
        other += other >= values
        if isinstance(rng, ExactRandomness):
            keep = coins(rng, self.exact_keep_threshold, m)
        else:
            keep = rng.random(m) < self.p
        return np.where(keep, values, other)

    def simulate_supports(self, counts, rng) -> np.ndarray:
        """Exact: since ``p = (p − q) + d·q``, a DE report is the true value with probability ``p − q``
        and otherwise uniform over all ``d`` values; so each value keeps Binomial(n_v, p − q) of its
        people and the rest of the population spreads multinomially and uniformly. (DE's support
        counts are not independent across values, so the per-value binomials of the parent class
        would be wrong.)"""
        counts = np.asarray(counts, dtype=np.int64)
        kept = rng.binomial(counts, self.p - self.q)
        rest = counts.sum(axis=-1) - kept.sum(axis=-1)
        d = self.domain_size
        return (kept + rng.multinomial(rest, np.full(d, 1.0 / d))).astype(np.float64)

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.bincount(np.asarray(reports, dtype=np.int64), minlength=self.domain_size).astype(float)

    def sparse_support(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reports = np.asarray(reports, dtype=np.int64).ravel()
        if reports.size == 1:
            return reports, np.ones(1)
        if reports.size <= SMALL:  # a few reports (a request's): counted in Python, without np.unique's setup
            counted = Counter(reports.tolist())
            cells = sorted(counted)
            return np.array(cells, dtype=np.int64), np.array([counted[c] for c in cells], dtype=float)
        cells, counts = np.unique(reports, return_counts=True)
        return cells, counts.astype(float)

    def log_likelihood(self, reports: np.ndarray, value: int) -> np.ndarray:
        reports = np.asarray(reports)
        return np.where(reports == value, math.log(self.p), math.log(self.q))
