"""Dummy reports: the shuffler's own blanket in every batch, and what they add to the statistics.

A shuffled collection's amplification assumes the other reports of a batch come from people. An
aggregator can make that false: it can send the shuffler reports of its own until a person's is
the only one it did not write (the *n − 1 attack*). So the shuffler adds ``M`` dummy reports to
every batch, drawn exactly as a device draws: an input chosen as a device chooses its own
(:func:`~participant.reporting.choose_inputs`), a value drawn uniformly from that input's domain
(:func:`dummy_values`), randomised by the input's mechanism with the device's exact samplers, packed
and sealed like a device's report. The aggregator cannot tell them from people's, so even when it
wrote every other report of a batch, a person's report hides among the ``M`` dummies: the shuffle
bound for ``M + 1`` reports (:mod:`protocols.shuffling`).

The aggregator knows how many dummies each batch held, not which. The value distribution of a
dummy is fixed, so its expected contribution to every input's statistics is known
(:func:`dummy_expectation`), and subtracting ``D`` times it from statistics that counted ``D``
dummies leaves every count estimate unbiased for the people's reports alone; what the dummies
cost is the variance they add (:func:`dummy_variance`).

Dummy values: a frequency-oracle input (the class, or a feature jointly with the class) takes a
value uniform over its domain. A Gaussian model's mean inputs take a class uniform over the ``k``
classes and every prepared coordinate ``z`` uniform in [-1, 1], as the class-hiding vector of
``z`` (or ``z²``) a device would build: entries of mean 0 (values) or ``1/(3k)`` (squares).
"""

from __future__ import annotations

import numpy as np

from protocols import Mechanism, PureOracle
from protocols.histogram import SummationHistogramEncoding
from protocols.mean import LaplaceMean, OneBitMean

from .reporting import Report, choose_inputs, input_probabilities
from .spec import CollectionSpec


def _squares(spec: CollectionSpec, i: int) -> bool:
    """Whether input ``i`` of a Gaussian spec carries squares (inputs alternate values, squares)."""
    return spec.model == "gaussian" and i > 0 and i % 2 == 0


def dummy_values(spec: CollectionSpec, i: int, count: int, rng) -> np.ndarray:
    """``count`` dummy values of input ``i``, in the form its mechanism's ``perturb`` takes."""
    oracle = spec.oracles[i]
    if spec.model != "gaussian" or i == 0:
        return np.asarray(rng.integers(0, oracle.state_size, size=count), dtype=np.int64)
    k = spec.n_classes
    r = oracle.state_size // k  # approach 3: one coordinate per input (length k); 1 and 2: all r
    classes = np.asarray(rng.integers(0, k, size=count), dtype=np.int64)
    z = 2.0 * np.asarray(rng.random(count * r), dtype=np.float64).reshape(count, r) - 1.0
    if _squares(spec, i):
        z = z**2
    hidden = np.zeros((count, r, k))
    hidden[np.arange(count), :, classes] = z
    return hidden.reshape(count, r * k)


def draw_dummies(spec: CollectionSpec, count: int, rng) -> list[Report]:
    """``count`` dummy reports of ``spec`` (inputs chosen as a device's, values by
    :func:`dummy_values`), each with a fresh random report id; ``rng`` is the device's
    :class:`~participant.randomness.SecureGenerator` in a shuffler."""
    inputs = choose_inputs(spec, count, rng)
    reports: list[Report | None] = [None] * count
    for i, oracle in enumerate(spec.oracles):
        rows = np.flatnonzero(inputs == i)
        if rows.size:
            payloads = oracle.perturb(dummy_values(spec, i, rows.size, rng), rng)
            for row, payload in zip(rows.tolist(), payloads):
                reports[row] = Report(i, payload)
    return reports


def dummy_states(spec: CollectionSpec, count: int, rng) -> list:
    """The summed states (:class:`~protocols.OracleState`, one per input) of ``count`` dummy
    reports, drawn from their exact distribution without drawing each report: what a simulation
    adds for a shuffler's dummies."""
    from protocols.base import FrequencyOracle

    per_input = rng.multinomial(count, input_probabilities(spec))
    states = []
    for i, (oracle, drawn) in enumerate(zip(spec.oracles, per_input)):
        if isinstance(oracle, FrequencyOracle):
            histogram = rng.multinomial(int(drawn), np.full(oracle.domain_size, 1.0 / oracle.domain_size))
            states.append(oracle.simulate_counts(histogram, rng))
        else:
            states.append(oracle.simulate(dummy_values(spec, i, int(drawn), rng), rng))
    return states


def _value_moments(spec: CollectionSpec, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of input ``i``: the mean of a dummy's value (a probability for a frequency
    oracle, a coordinate for a mean) and of its square."""
    size = spec.oracles[i].state_size
    if spec.model != "gaussian" or i == 0:
        return np.full(size, 1.0 / size), np.full(size, 1.0 / size)
    k = spec.n_classes
    if _squares(spec, i):  # z² at the class: E z² = 1/3, E z⁴ = 1/5
        return np.full(size, 1.0 / (3 * k)), np.full(size, 1.0 / (5 * k))
    return np.zeros(size), np.full(size, 1.0 / (3 * k))


def _expected_support(oracle: Mechanism, mean: np.ndarray) -> np.ndarray:
    """What one report adds to the support, in expectation, for values of mean ``mean``."""
    if isinstance(oracle, PureOracle):
        return oracle.q + (oracle.p - oracle.q) * mean
    return mean  # SHE and the mean mechanisms sum unbiased values


def dummy_expectation(spec: CollectionSpec) -> list[tuple[float, np.ndarray]]:
    """Per input: the probability that a dummy reports it, and what it then adds to the input's
    support in expectation (shape ``(state_size,)``). ``D`` dummies add ``D·π_i`` reports and
    ``D·π_i·μ_i`` support to input ``i`` in expectation."""
    shares = input_probabilities(spec)
    return [
        (float(shares[i]), _expected_support(oracle, _value_moments(spec, i)[0]))
        for i, oracle in enumerate(spec.oracles)
    ]


def dummy_variance(spec: CollectionSpec, count: float) -> list[np.ndarray]:
    """Per input, the variance ``count`` dummies add, once their expectation is subtracted, to the
    input's count estimates (frequency oracles) or summed support (mean mechanisms), per cell:
    ``count·Var(X)``, ``X`` what one dummy adds (zero when it reports another input)."""
    shares = input_probabilities(spec)
    out = []
    for i, oracle in enumerate(spec.oracles):
        mean, square = _value_moments(spec, i)
        if isinstance(oracle, (PureOracle, SummationHistogramEncoding)):
            # Given the value, one report's estimate has the oracle's variance (linear in the value's
            # indicator, so at the mean indicator it is averaged over values) and mean the indicator.
            second = oracle.variance(1, mean) + square
        elif isinstance(oracle, OneBitMean):
            second = np.full(oracle.state_size, oracle.magnitude**2 / oracle.dim)
        elif isinstance(oracle, LaplaceMean):
            second = oracle.variance(1) + square
        else:  # pragma: no cover (every mechanism a spec builds is one of the above)
            raise TypeError(f"no dummy moments for {type(oracle).__name__}")
        share = float(shares[i])
        out.append(count * (share * second - (share * mean) ** 2))
    return out
