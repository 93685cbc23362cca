"""The frequency-oracle interface shared by every protocol, and its mergeable aggregate state.

A frequency oracle lets each of ``m`` people hold one value from ``{0, ..., d-1}`` and send one
randomised report that is ε-locally differentially private: for any two values ``v1, v2`` and any
report ``o``, ``Pr[o | v1] <= e^ε · Pr[o | v2]``. The aggregator sums reports into an
:class:`OracleState` and turns it into unbiased estimates of how many people hold each value.

Randomness: every ``perturb`` takes ``rng``, any object with numpy ``Generator``'s ``random(size)``
and ``integers(low, high, size)`` methods. Simulations pass a seeded ``numpy.random.Generator``;
the participant library passes a cryptographically secure source.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np


@dataclass
class OracleState:
    """Sufficient statistics of a set of reports for one input.

    ``n`` is the number of reports and ``support`` (shape ``(d,)``, float64) the per-value sum of
    what the protocol counts for each value (report counts, set bits, or summed noisy values).
    Two states of the same oracle add, so shards and restarts merge exactly.
    """

    n: int
    support: np.ndarray

    @classmethod
    def empty(cls, domain_size: int) -> OracleState:
        return cls(0, np.zeros(domain_size, dtype=np.float64))

    def __add__(self, other: OracleState) -> OracleState:
        if self.support.shape != other.support.shape:
            raise ValueError(
                f"cannot merge states of domain sizes {self.support.shape[0]} and {other.support.shape[0]}"
            )
        return OracleState(self.n + other.n, self.support + other.support)


def check_epsilon(epsilon) -> float:
    if isinstance(epsilon, bool) or not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


class Mechanism(ABC):
    """An ε-LDP mechanism whose reports sum into a mergeable :class:`OracleState`.

    ``state_size`` is the length of the summed support vector. The wire attributes say how one
    report travels: ``wire_kind`` is ``"index"`` (an integer in ``[0, wire_length)``), ``"bits"``
    (``wire_length`` bits) or ``"floats"`` (``wire_length`` float64, each of magnitude at most
    ``wire_bound``).
    """

    name: ClassVar[str]
    epsilon: float
    state_size: int
    wire_kind: ClassVar[str]
    wire_length: int
    wire_bound: float = math.inf

    @abstractmethod
    def perturb(self, values, rng) -> np.ndarray:
        """Randomise each person's value; returns one report per value (row ``i`` for ``values[i]``)."""

    @abstractmethod
    def support(self, reports: np.ndarray) -> np.ndarray:
        """Sum over ``reports`` of what the estimator counts; shape ``(state_size,)``, float64."""

    def sparse_support(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`support` as ``(cells, values)``: the cells the reports add to (ascending, int64)
        and what they add there (float64); every other cell gains 0. An index report (DE, the
        one-bit mean) touches one cell whatever the domain, and its store writes only that cell."""
        dense = self.support(reports)
        cells = np.flatnonzero(dense)
        return cells.astype(np.int64), dense[cells]

    def aggregate(self, reports: np.ndarray) -> OracleState:
        """The mergeable state of ``reports``."""
        return OracleState(int(len(reports)), self.support(reports).astype(np.float64))

    def simulate(self, values, rng) -> OracleState:
        """The state of the reports of people holding ``values``, drawn from its exact
        distribution. By default by perturbing every value; mechanisms whose state has a closed-form
        distribution override this so the cost grows with the domain, not with the people."""
        return self.aggregate(self.perturb(values, rng))

    @abstractmethod
    def estimate(self, state: OracleState) -> np.ndarray:
        """The unbiased estimate the state supports; shape ``(state_size,)``."""

    @abstractmethod
    def variance(self, n: int, true_counts=None) -> np.ndarray:
        """Variance of :meth:`estimate` for ``n`` reports, per coordinate; shape ``(state_size,)``."""

    @abstractmethod
    def log_likelihood(self, reports: np.ndarray, value) -> np.ndarray:
        """Natural log of Pr[report | value] (a density for continuous reports), one per report.

        This is the mechanism's distribution as the privacy proof uses it; tests check that
        :meth:`perturb` samples from it and that its worst-case log-ratio is at most ε.
        """


class FrequencyOracle(Mechanism):
    """An ε-LDP frequency oracle over the domain ``{0, ..., domain_size - 1}``."""

    def __init__(self, epsilon: float, domain_size: int):
        self.epsilon = check_epsilon(epsilon)
        if int(domain_size) != domain_size or domain_size < 2:
            raise ValueError(f"domain_size must be an integer >= 2, got {domain_size!r}")
        self.domain_size = int(domain_size)

    @property
    def state_size(self) -> int:
        return self.domain_size

    @property
    def wire_length(self) -> int:
        return self.domain_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.domain_size})"

    def simulate(self, values, rng) -> OracleState:
        return self.simulate_counts(np.bincount(self._check_values(values), minlength=self.domain_size), rng)

    def simulate_counts(self, counts, rng) -> OracleState:
        """The state of the reports of a population with histogram ``counts`` (shape ``(d,)``),
        drawn from its exact distribution (:meth:`simulate_supports` of one population)."""
        counts = np.asarray(counts, dtype=np.int64)
        return OracleState(int(counts.sum()), self.simulate_supports(counts[None], rng)[0])

    def simulate_supports(self, counts, rng) -> np.ndarray:
        """The supports (float64, shape ``(G, d)``) of ``G`` independent populations' reports, the
        populations' histograms the rows of ``counts`` (shape ``(G, d)``), each drawn from its exact
        distribution; by default by perturbing every person. Subclasses draw all rows at once."""
        values = [np.repeat(np.arange(self.domain_size), row) for row in np.asarray(counts, dtype=np.int64)]
        return np.array([self.aggregate(self.perturb(v, rng)).support for v in values], dtype=np.float64)

    def _check_values(self, values) -> np.ndarray:
        values = np.asarray(values)
        if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
            raise ValueError("values must be a 1-d array of integers")
        if values.size and (values.min() < 0 or values.max() >= self.domain_size):
            raise ValueError(f"values must lie in [0, {self.domain_size - 1}]")
        return values.astype(np.int64, copy=False)

    @abstractmethod
    def estimate(self, state: OracleState) -> np.ndarray:
        """Unbiased estimate of how many reporters hold each value; shape ``(d,)``, may be negative."""

    @abstractmethod
    def variance(self, n: int, true_counts=None) -> np.ndarray:
        """Exact variance of :meth:`estimate` for ``n`` reporters, per value; shape ``(d,)``.

        ``true_counts`` (shape ``(d,)``) are how many of the ``n`` hold each value; omitted, they
        are taken as zero, the approximation Wang et al. (2017) use to compare protocols.
        """


def simulate_states(oracles, histograms, rng) -> list[OracleState]:
    """The states of independent populations' reports, population ``i`` with histogram
    ``histograms[i]`` (shape ``(d_i,)``) reporting through ``oracles[i]``, each drawn exactly.
    Inputs with identical oracles (type, ε, domain, THE's θ) are drawn in one
    :meth:`FrequencyOracle.simulate_supports` call: connect-4's 42 feature inputs are one draw."""
    groups: dict[tuple, list[int]] = {}
    for i, oracle in enumerate(oracles):
        key = (type(oracle), oracle.epsilon, oracle.domain_size, getattr(oracle, "theta", None))
        groups.setdefault(key, []).append(i)
    states: list[OracleState] = [None] * len(oracles)  # type: ignore[list-item]
    for inputs in groups.values():
        rows = np.stack([np.asarray(histograms[i], dtype=np.int64) for i in inputs])
        for i, row, support in zip(inputs, rows, oracles[inputs[0]].simulate_supports(rows, rng)):
            states[i] = OracleState(int(row.sum()), support)
    return states


class PureOracle(FrequencyOracle):
    """A 'pure' protocol (Wang et al. 2017): a report supports value ``i`` with probability ``p``
    if the person holds ``i`` and ``q`` otherwise, independently across people.

    The estimate of value ``i``'s count is ``(c_i - n·q) / (p - q)`` where ``c_i`` counts the
    reports that support ``i``.
    """

    @property
    @abstractmethod
    def p(self) -> float: ...

    @property
    @abstractmethod
    def q(self) -> float: ...

    def estimate(self, state: OracleState) -> np.ndarray:
        return (state.support - state.n * self.q) / (self.p - self.q)

    def simulate_supports(self, counts, rng) -> np.ndarray:
        """Exact: value ``i``'s support count is Binomial(n_i, p) + Binomial(n - n_i, q), independent
        across values (every report supports each value independently)."""
        counts = np.asarray(counts, dtype=np.int64)
        n = counts.sum(axis=-1, keepdims=True)
        return (rng.binomial(counts, self.p) + rng.binomial(n - counts, self.q)).astype(np.float64)

    def variance(self, n: int, true_counts=None) -> np.ndarray:
        t = np.zeros(self.domain_size) if true_counts is None else np.asarray(true_counts, float)
        p, q = self.p, self.q
        return (t * p * (1 - p) + (n - t) * q * (1 - q)) / (p - q) ** 2
