"""Exact sampling for the device path: every probability a report is drawn with is a rational
number the code states, so the privacy ratio holds exactly, not to double precision.

A coin ``random() < p`` realises ``⌈p·2^53⌉/2^53``, and a geometric variable drawn by inverting a
double has a largest value and gaps near it, where one input's output is impossible and a
neighbour's is not. Here instead:

- **Coins** compare a uniform 64-bit integer with an integer threshold ``T``: the realised
  probability is exactly ``T/2^64``. Thresholds come from a certified lower bound ``E <= e^ε``
  (:func:`exp_lower`), rounding the probability that may be larger down and the one that may be
  smaller up, so every realised ratio is at most ``E``, hence at most ``e^ε``.
- **Discrete Laplace** noise uses Canonne, Kamath and Steinke's sampler (NeurIPS 2020,
  algorithms 1 and 2): uniform integers and Bernoulli(exp(-x)) draws for rational ``x`` only. A
  float ε is an exact binary fraction, so the rate ``ε·GRID/Δ`` is an exact rational and the
  noise is exactly ``DLap(exp(-ε·GRID/Δ))``: every grid output has the probability the privacy
  proof uses, with no largest value.

The source of randomness is any :class:`ExactRandomness` (the participant library's CSPRNG).
Simulations keep their fast numpy samplers; they release nothing.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from fractions import Fraction

import numpy as np

WORD_BITS = 64
ONE = 1 << WORD_BITS  # coin thresholds are numerators over 2^64


class ExactRandomness(ABC):
    """A source of exactly uniform integers."""

    @abstractmethod
    def randbelow(self, n: int) -> int:
        """A uniform integer in ``[0, n)``, for any positive Python integer ``n``."""

    @abstractmethod
    def words(self, count: int) -> np.ndarray:
        """``count`` uniform 64-bit words, uint64."""


def exp_lower(x: Fraction, bits: int = 128) -> Fraction:
    """A rational ``L <= e^x`` for rational ``x >= 0``, within a relative ``2^-bits·(terms)``:
    the Taylor series' partial sum in fixed point, every term rounded down (all terms are positive,
    so each rounding and the truncation only lower it)."""
    x = Fraction(x)
    if x < 0:
        raise ValueError("exp_lower takes x >= 0")
    scale = 1 << bits
    term = scale
    total = 0
    n = 0
    while term:
        total += term
        n += 1
        term = term * x.numerator // (x.denominator * n)
    return Fraction(total, scale)


def threshold_down(p: Fraction) -> int:
    """The largest ``T`` with ``T/2^64 <= p`` (``p`` in [0, 1])."""
    return (p.numerator * ONE) // p.denominator


def threshold_up(p: Fraction) -> int:
    """The smallest ``T`` with ``T/2^64 >= p`` (``p`` in [0, 1])."""
    return -((-p.numerator * ONE) // p.denominator)


def coins(source: ExactRandomness, threshold: int | np.ndarray, size: int) -> np.ndarray:
    """``size`` independent coins, each true with probability exactly ``threshold/2^64``
    (``threshold`` an integer in [0, 2^64], or an array of them, one per coin)."""
    words = source.words(size)
    threshold = np.asarray(threshold, dtype=object)
    # Compare as Python integers where a threshold may be 2^64 (certain): uint64 cannot hold it.
    if threshold.size and int(np.max(threshold)) >= ONE:
        return np.array([int(w) < int(t) for w, t in zip(words, np.broadcast_to(threshold, (size,)))], dtype=bool)
    return words < threshold.astype(np.uint64)


def bernoulli(source: ExactRandomness, p: Fraction) -> bool:
    """True with probability exactly ``p`` (rational, in [0, 1])."""
    return source.randbelow(p.denominator) < p.numerator


def bernoulli_exp(source: ExactRandomness, gamma: Fraction) -> bool:
    """True with probability exactly ``exp(-gamma)``, rational ``gamma >= 0`` (CKS algorithm 1)."""
    gamma = Fraction(gamma)
    while gamma > 1:
        if not bernoulli_exp(source, Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while bernoulli(source, gamma / k):
        k += 1
    return k % 2 == 1


def discrete_laplace(source: ExactRandomness, gamma: Fraction, size: int) -> np.ndarray:
    """``size`` integers with ``P(k) ∝ exp(-gamma·|k|)`` exactly (CKS algorithm 2, rate
    ``s/t = gamma``); int64."""
    gamma = Fraction(gamma)
    s, t = gamma.numerator, gamma.denominator
    out = np.empty(size, dtype=np.int64)
    for i in range(size):
        while True:
            u = source.randbelow(t)
            if not bernoulli_exp(source, Fraction(u, t)):
                continue
            v = 0
            while bernoulli_exp(source, Fraction(1)):
                v += 1
            y = (u + t * v) // s  # X = u + t·v is geometric with rate 1/t; Y = ⌊X/s⌋ with rate s/t
            negative = source.randbelow(2) == 1
            if negative and y == 0:
                continue
            out[i] = -y if negative else y
            break
    return out


def grid_rate(epsilon: float, sensitivity: float, grid: float) -> Fraction:
    """The discrete Laplace rate ``ε·grid/Δ`` as an exact rational (floats are binary fractions)."""
    return Fraction(epsilon) * Fraction(grid) / Fraction(sensitivity)


def round_to_grid(source: ExactRandomness, values: np.ndarray, grid: float) -> np.ndarray:
    """Each value moved to one of its two neighbouring grid points: the upper one with probability
    exactly ``⌊f·2^64⌋/2^64``, ``f`` the value's distance from the lower point in grid units (so
    the expectation moves by less than ``2^-64`` of a step). One 64-bit word per value, compared
    as integers: the randomness drawn and the work done do not depend on the values (a rational
    coin's denominator would). The privacy of the grid noise holds for any grid point, so the
    rounding probabilities need no certificate. ``grid`` must be a power of two (then ``value /
    grid`` and its fractional part are exact doubles)."""
    if math.frexp(grid)[0] != 0.5:
        raise ValueError(f"grid must be a power of two, got {grid!r}")
    values = np.asarray(values, dtype=float)
    scaled = values / grid
    lower = np.floor(scaled)
    # The fractional part is exact and below 1, so its 64-bit threshold fits a uint64.
    threshold = np.floor((scaled - lower) * 2.0**WORD_BITS).astype(np.uint64)
    up = source.words(values.size).reshape(values.shape) < threshold
    return (lower + up) * grid
