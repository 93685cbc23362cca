import functools
import math
import warnings

import numpy as np
import pytest
from scipy.stats import binomtest

from protocols import OptimisedUnaryEncoding, SymmetricUnaryEncoding, make_oracle
from protocols.audit import audit
from protocols.direct import DirectEncoding
from protocols.histogram import SummationHistogramEncoding
from protocols.mean import LaplaceMean, OneBitMean
from protocols.noise import GRID, discrete_laplace

N = 200_000


@pytest.mark.parametrize("protocol", ["DE", "SUE", "OUE", "SHE", "THE"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_every_frequency_oracle_passes_the_audit_tightly(protocol, epsilon):
    oracle = make_oracle(protocol, epsilon, 4)
    result = audit(oracle, 0, 1, N, np.random.default_rng(0))
    assert result.epsilon_lower_bound <= epsilon
    # The audit is sharp: the events reach close to the stated ε, so a larger loss would show.
    assert result.epsilon_lower_bound > 0.8 * epsilon


@pytest.mark.parametrize("mechanism, a, b", [
    (LaplaceMean(1.0, 2, 2.0), [1.0, 0.0], [-1.0, 0.0]),
    (OneBitMean(1.0, 2), [1.0, 0.0], [-1.0, 0.0]),
])  # fmt: skip
def test_mean_mechanisms_pass_the_audit(mechanism, a, b):
    result = audit(mechanism, a, b, N, np.random.default_rng(1))
    assert 0.7 * mechanism.epsilon < result.epsilon_lower_bound <= mechanism.epsilon


class TooConfidentOUE(OptimisedUnaryEncoding):
    """Reports the true bit with probability 0.7 instead of 1/2: log-ratio 1.85 at ε = 1."""

    def perturb(self, values, rng):
        bits = rng.random((len(values), self.domain_size)) < self.q
        bits[np.arange(len(values)), values] = rng.random(len(values)) < 0.7
        return bits


class HalfNoiseSHE(SummationHistogramEncoding):
    """Forgets the factor 2 of the sensitivity: noise of scale 1/ε, so 2ε-LDP."""

    def perturb(self, values, rng):
        m = len(values)
        reports = GRID * discrete_laplace(rng, math.exp(-self.epsilon * GRID), (m, self.domain_size))
        reports[np.arange(m), values] += 1.0
        return reports


class PerCoordinateLaplace(LaplaceMean):
    """Approach 1 without scaling the noise by the dimension count."""


@pytest.mark.parametrize("broken, a, b", [
    (TooConfidentOUE(1.0, 4), 0, 1),
    (HalfNoiseSHE(1.0, 4), 0, 1),
    (SymmetricUnaryEncoding(2.0, 4), 0, 1),  # an honest 2-LDP SUE, audited as if it claimed 1
    (PerCoordinateLaplace(1.0, 4, sensitivity=1.0), [1.0, 0, 0, 0], [-1.0, 0, 0, 0]),
])  # fmt: skip
def test_broken_mechanisms_fail_the_audit(broken, a, b):
    claimed = 1.0
    assert audit(broken, a, b, N, np.random.default_rng(2)).epsilon_lower_bound > claimed


class ScriptedDE(DirectEncoding):
    """Reports fixed values: the first call (input a) gives ``for_a``, the second ``for_b``."""

    def __init__(self, for_a, for_b):
        super().__init__(1.0, 2)
        self.scripted = [np.asarray(for_a), np.asarray(for_b)]

    def perturb(self, values, rng):
        return self.scripted.pop(0)


@functools.cache
def exact_interval(k: int, n: int, level: float):
    """scipy's exact binomial interval of ``k`` in ``n`` leaving ``level`` out on each side; each
    count is the top of one ratio and the bottom of another, and the cases repeat counts."""
    return binomtest(k, n).proportion_ci(1 - 2 * level, method="exact")


def clopper_pearson_bound(for_a, for_b, alpha):
    """The audit's bound recomputed with scipy's exact binomial intervals, event by event:
    ``(bound, event)`` with events in the order a-over-b first, then b-over-a."""
    n, size = len(for_a), int(max(max(for_a), max(for_b))) + 1
    level = alpha / (4 * size)  # four one-sided bounds per event must hold together
    ca, cb = np.bincount(for_a, minlength=size), np.bincount(for_b, minlength=size)
    interval = lambda k: exact_interval(int(k), n, level)
    ratios = []
    for top, bottom in ((ca, cb), (cb, ca)):
        for e in range(size):
            low, high = interval(top[e]).low, interval(bottom[e]).high
            ratios.append(math.log(low / high) if low > 0 else -math.inf)
    best = int(np.argmax(ratios))
    return max(ratios[best], 0.0), best % size


def test_the_audit_bound_is_the_clopper_pearson_ratio_event_by_event():
    rng = np.random.default_rng(5)
    cases = 0
    for _ in range(300):
        n, size = int(rng.integers(1, 25)), int(rng.integers(1, 5))
        # Skewed event probabilities, so some events get no report and some get all of them.
        for_a = rng.choice(size, n, p=rng.dirichlet(np.full(size, 0.3)))
        for_b = rng.choice(size, n, p=rng.dirichlet(np.full(size, 0.3)))
        alpha = float(rng.choice([1e-3, 0.05, 0.3]))
        expected, event = clopper_pearson_bound(for_a, for_b, alpha)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no division warnings leak to the caller
            result = audit(ScriptedDE(for_a, for_b), 0, 1, n, rng, alpha=alpha)
        assert result.epsilon_lower_bound == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert result.samples == n
        if expected > 0:
            cases += 1
            assert result.event == event and isinstance(result.event, int)
    assert cases > 50  # enough cases where an event separates the inputs


def test_the_audit_events_separate_every_outcome_that_matters():
    from protocols.audit import _events

    oue = OptimisedUnaryEncoding(1.0, 3)
    bits = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    assert sorted(_events(oue, bits, 0, 1).tolist()) == [0, 1, 2, 3]  # the two differing bits, jointly
    she = SummationHistogramEncoding(1.0, 3)
    values = np.array([[-0.5, -0.5, 9.0], [0.5, 1.5, 9.0], [1.0, 0.0, 9.0]])
    assert _events(she, values, 0, 1).tolist() == [0, 5, 7]  # buckets (-inf, 0), [0, 1), [1, inf), jointly
    laplace = LaplaceMean(1.0, 3, 2.0)
    reports = np.array([[5.0, -1.5, 5.0], [5.0, 0.0, 5.0], [5.0, 1.0, 5.0]])
    # The coordinate where the inputs differ, split at its tails beyond ±1.
    assert _events(laplace, reports, [0.0, 1.0, 0.0], [0.0, -1.0, 0.0]).tolist() == [0, 1, 2]
