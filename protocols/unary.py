"""Unary encodings: symmetric (SUE, basic RAPPOR) and optimised (OUE)."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cached_property

import numpy as np

from .base import PureOracle
from .exact import ExactRandomness, coins, exp_lower, threshold_down, threshold_up


class UnaryEncoding(PureOracle):
    """Encode value ``v`` as a length-``d`` one-hot bit vector and flip each bit independently:
    bit ``v`` is reported as 1 with probability ``p``, every other bit with probability ``q``.
    Two values' vectors differ in two bits, so the worst-case ratio is
    ``p(1-q) / ((1-p) q)``, which both variants set to ``e^ε``.

    Reports are boolean arrays of shape ``(m, d)``.
    """

    wire_kind = "bits"

    def _exact_bounds(self) -> tuple[Fraction, Fraction]:
        """``(p, q)`` as rationals from a lower bound of the exponential, such that rounding
        ``p`` down and ``q`` up keeps the ratio at most ``e^ε``."""
        raise NotImplementedError

    @cached_property  # a certified bound of e^ε, computed once per mechanism
    def exact_thresholds(self) -> tuple[int, int]:
        """The device's coins: the true bit is set with probability exactly ``T_p/2^64``, every
        other bit with ``T_q/2^64`` (``p`` rounded down, ``q`` up)."""
        p, q = self._exact_bounds()
        return threshold_down(p), threshold_up(q)

    def perturb(self, values, rng) -> np.ndarray:
        values = self._check_values(values)
        m = values.shape[0]
        if isinstance(rng, ExactRandomness):
            t_p, t_q = self.exact_thresholds
            bits = coins(rng, t_q, m * self.domain_size).reshape(m, self.domain_size)
            bits[np.arange(m), values] = coins(rng, t_p, m)
            return bits
        bits = rng.random((m, self.domain_size)) < self.q
        bits[np.arange(m), values] = rng.random(m) < self.p
        return bits

    def support(self, reports: np.ndarray) -> np.ndarray:
        return np.count_nonzero(reports, axis=0).astype(float)

    def log_likelihood(self, reports: np.ndarray, value: int) -> np.ndarray:
        bits = np.asarray(reports, dtype=bool)
        on = np.full(self.domain_size, math.log(self.q))
        off = np.full(self.domain_size, math.log1p(-self.q))
        on[value], off[value] = math.log(self.p), math.log1p(-self.p)
        return np.where(bits, on, off).sum(axis=-1)


class SymmetricUnaryEncoding(UnaryEncoding):
    """SUE: ``p = e^{ε/2} / (e^{ε/2} + 1)``, ``q = 1 - p``."""

    name = "SUE"

    @property
    def p(self) -> float:
        h = math.exp(self.epsilon / 2)
        return h / (h + 1)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon / 2) + 1)

    def _exact_bounds(self) -> tuple[Fraction, Fraction]:
        # p/(1-p) <= H and (1-q)/q <= H with H <= e^{ε/2}: the ratio is at most H² <= e^ε.
        h = exp_lower(Fraction(self.epsilon) / 2)
        return h / (h + 1), 1 / (h + 1)


class OptimisedUnaryEncoding(UnaryEncoding):
    """OUE: ``p = 1/2``, ``q = 1 / (e^ε + 1)``, which minimises the estimate's variance."""

    name = "OUE"

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + 1)

    def _exact_bounds(self) -> tuple[Fraction, Fraction]:
        # p = 1/2 exactly; (1-q)/q <= E <= e^ε.
        return Fraction(1, 2), 1 / (exp_lower(Fraction(self.epsilon)) + 1)
