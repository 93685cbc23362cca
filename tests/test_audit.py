import math

import numpy as np
import pytest

from protocols import OptimisedUnaryEncoding, SymmetricUnaryEncoding, make_oracle
from protocols.audit import audit
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
