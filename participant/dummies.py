"""Dummy reports: the shuffler's own blanket in every batch, and what they add to the statistics.

A shuffled collection's amplification assumes the other reports of a batch come from people. An
aggregator can make that false: it can send the shuffler reports of its own until a person's is
the only one it did not write (the *n − 1 attack*). So the shuffler adds ``M`` dummy reports to
every batch, drawn as a device draws: an input chosen as a device chooses its own
(:func:`~participant.reporting.choose_inputs`, independently per dummy), a value from a fixed
composition (:func:`dummy_values`), randomised by the input's mechanism with the device's exact
samplers, packed and sealed like a device's report. The aggregator cannot tell them from people's,
so even when it wrote every other report of a batch, a person's report hides among the ``M``
dummies: the shuffle bound for ``M + 1`` reports (:mod:`protocols.shuffling`).

The composition: the ``c`` dummies that chose a frequency-oracle input (the class, or a feature
jointly with the class) with ``d`` values carry each value ``⌊c/d⌋`` or ``⌈c/d⌉`` times, the
``c mod d`` values that get one more chosen uniformly without replacement (:func:`balanced_counts`).
A Gaussian model's mean inputs take the class balanced the same way and every prepared coordinate
at the mean of a uniform one on [-1, 1]: ``z = 0`` (values) and ``z² = 1/3`` (squares). Nothing
in it depends on anyone's data: it is a function of the spec and the dummies' own input choices.
Each input keeps the expectation a uniform value gives (every value equally likely for each
dummy), so the aggregator, which knows how many dummies a batch held and not which, subtracts the
same :func:`dummy_expectation` as before; what the dummies then add is the randomiser's noise,
the spread of how many dummies chose the input (one shift common to its cells) and the
remainder's draw (:func:`dummy_variance`), not the spread of uniform values: the noise floor a
uniform draw put under every estimate whatever ε.

The input stays an independent choice per dummy (not balanced too): a fixed count of dummies per
input would tell an aggregator that wrote every other report which input the person's report
carries, leaving it among that input's ``M/(n + 1)`` dummies alone, which the shuffle bound for
``M + 1`` does not cover.
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


def _level(spec: CollectionSpec, i: int) -> float:
    """The prepared coordinate every dummy of Gaussian mean input ``i`` carries: the mean of a
    uniform ``z`` on [-1, 1] (0) or of its square (1/3)."""
    return 1.0 / 3.0 if _squares(spec, i) else 0.0


def _domain(spec: CollectionSpec, i: int) -> int:
    """How many values input ``i``'s composition balances: its oracle's domain, or the classes of a
    Gaussian mean input."""
    if spec.model != "gaussian" or i == 0:
        return spec.oracles[i].state_size
    return spec.n_classes


def balanced_counts(count: int, d: int, rng) -> np.ndarray:
    """How many of ``count`` dummies carry each of ``d`` values, shape ``(d,)``: ``⌊count/d⌋``
    each, and one more for ``count mod d`` values chosen uniformly without replacement, so that
    each value's expected count is exactly ``count/d``."""
    counts = np.full(d, int(count) // d, dtype=np.int64)
    extra = int(count) % d
    if extra:
        counts[np.argsort(rng.random(d))[:extra]] += 1
    return counts


def dummy_values(spec: CollectionSpec, i: int, count: int, rng) -> np.ndarray:
    """``count`` dummy values of input ``i`` from its fixed composition (:func:`balanced_counts`,
    in random order), in the form its mechanism's ``perturb`` takes."""
    d = _domain(spec, i)
    values = np.repeat(np.arange(d, dtype=np.int64), balanced_counts(count, d, rng))
    values = values[np.argsort(rng.random(count))] if count > 1 else values
    if spec.model != "gaussian" or i == 0:
        return values
    k = spec.n_classes
    r = spec.oracles[i].state_size // k  # approach 3: one coordinate per input (length k); 1 and 2: all r
    hidden = np.zeros((count, r, k))
    hidden[np.arange(count), :, values] = _level(spec, i)
    return hidden.reshape(count, r * k)


def draw_dummies(spec: CollectionSpec, count: int, rng) -> list[Report]:
    """``count`` dummy reports of ``spec`` (inputs chosen as a device's, values by
    :func:`dummy_values` among the dummies of each input), each with a fresh random report id;
    ``rng`` is the device's :class:`~participant.randomness.SecureGenerator` in a shuffler."""
    inputs = choose_inputs(spec, count, rng)
    reports: list[Report | None] = [None] * count
    for i, oracle in enumerate(spec.oracles):
        rows = np.flatnonzero(inputs == i)
        if rows.size:
            payloads = oracle.perturb(dummy_values(spec, i, rows.size, rng), rng)
            for row, payload in zip(rows.tolist(), payloads):
                reports[row] = Report(i, payload)
    return reports


def dummy_states(spec: CollectionSpec, count: int, rng, uniform: bool = False) -> list:
    """The summed states (:class:`~protocols.OracleState`, one per input) of ``count`` dummy
    reports, drawn from their exact distribution without drawing each report: what a simulation
    adds for a shuffler's dummies. ``uniform`` draws each dummy's value uniformly instead of from
    the composition (the earlier dummies, kept for ``research/dummies.py`` to compare)."""
    from protocols.base import FrequencyOracle

    per_input = rng.multinomial(count, input_probabilities(spec))
    states = []
    for i, (oracle, drawn) in enumerate(zip(spec.oracles, per_input)):
        drawn = int(drawn)
        if isinstance(oracle, FrequencyOracle):
            d = oracle.domain_size
            histogram = rng.multinomial(drawn, np.full(d, 1.0 / d)) if uniform else balanced_counts(drawn, d, rng)
            states.append(oracle.simulate_counts(histogram, rng))
        elif uniform:
            states.append(oracle.simulate(_uniform_values(spec, i, drawn, rng), rng))
        else:
            states.append(oracle.simulate(dummy_values(spec, i, drawn, rng), rng))
    return states


def _uniform_values(spec: CollectionSpec, i: int, count: int, rng) -> np.ndarray:
    """``count`` values of Gaussian mean input ``i`` with a uniform class and uniform ``z`` on [-1, 1]."""
    k = spec.n_classes
    r = spec.oracles[i].state_size // k
    classes = rng.integers(0, k, size=count)
    z = 2.0 * rng.random((count, r)) - 1.0
    hidden = np.zeros((count, r, k))
    hidden[np.arange(count), :, classes] = z**2 if _squares(spec, i) else z
    return hidden.reshape(count, r * k)


def _value_means(spec: CollectionSpec, i: int) -> np.ndarray:
    """Per cell of input ``i``: the mean of one dummy's value (a probability for a frequency
    oracle, a coordinate for a mean), shape ``(state_size,)``."""
    size = spec.oracles[i].state_size
    if spec.model != "gaussian" or i == 0:
        return np.full(size, 1.0 / size)
    return np.full(size, _level(spec, i) / spec.n_classes)


def remainder_variance(count: int, share: float, d: int) -> float:
    """The variance of how many of ``count`` dummies carry one given value of an input with ``d``
    values that each dummy chooses with probability ``share``: ``Var(c)/d²`` (``c ~ Bin(count,
    share)``, the dummies that chose the input) plus ``E[(r/d)(1 − r/d)]`` (``r = c mod d``, the
    remainder's draw), in squared counts."""
    from scipy.stats import binom

    count = int(np.rint(count))
    if count <= 0:
        return 0.0
    c = np.arange(count + 1)
    weight = binom.pmf(c, count, share)
    r = (c % d) / d
    return float(count * share * (1 - share) / d**2 + (weight * r * (1 - r)).sum())


def _expected_support(oracle: Mechanism, mean: np.ndarray) -> np.ndarray:
    """What one report adds to the support, in expectation, for values of mean ``mean``."""
    if isinstance(oracle, PureOracle):
        return oracle.q + (oracle.p - oracle.q) * mean
    return mean  # SHE and the mean mechanisms sum unbiased values


def dummy_expectation(spec: CollectionSpec) -> list[tuple[float, np.ndarray]]:
    """Per input: the probability that a dummy reports it, and what it then adds to the input's
    support in expectation (shape ``(state_size,)``). ``D`` dummies add ``D·π_i`` reports and
    ``D·π_i·μ_i`` support to input ``i`` in expectation, whatever the composition's remainder."""
    shares = input_probabilities(spec)
    return [
        (float(shares[i]), _expected_support(oracle, _value_means(spec, i))) for i, oracle in enumerate(spec.oracles)
    ]


def dummy_variance(spec: CollectionSpec, count: float, batches: int = 1) -> list[np.ndarray]:
    """Per input, the variance ``count`` dummies (in ``batches`` equal batches, each composed on
    its own) add, once their expectation is subtracted, to the input's count estimates (frequency
    oracles, in squared counts) or summed support (mean mechanisms), per cell: the randomiser's
    noise given the values, ``count·π_i·E[Var(X | value)]``, plus the composition's spread,
    ``batches·`` :func:`remainder_variance` of a batch times the square of what one value adds
    to the cell (1 for a count; the coordinate for a mean: zero for values, 1/9 for squares)."""
    shares = input_probabilities(spec)
    batches = max(int(batches), 1)
    out = []
    for i, oracle in enumerate(spec.oracles):
        share, mean = float(shares[i]), _value_means(spec, i)
        if isinstance(oracle, (PureOracle, SummationHistogramEncoding)):
            # Linear in the value's indicator, so over the balanced values it is the oracle's
            # variance at the mean indicator.
            noise = oracle.variance(1, mean)
            scale = 1.0
        elif isinstance(oracle, OneBitMean):
            # A report's coordinate has second moment magnitude²/dim whatever the value.
            noise = np.full(oracle.state_size, oracle.magnitude**2 / oracle.dim) - _level(spec, i) ** 2 / spec.n_classes
            scale = _level(spec, i) ** 2
        elif isinstance(oracle, LaplaceMean):
            noise = oracle.variance(1)
            scale = _level(spec, i) ** 2
        else:  # pragma: no cover (every mechanism a spec builds is one of the above)
            raise TypeError(f"no dummy moments for {type(oracle).__name__}")
        spread = batches * remainder_variance(count / batches, share, _domain(spec, i)) if scale else 0.0
        out.append(count * share * noise + scale * spread)
    return out
