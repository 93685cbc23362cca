import itertools
import math

import numpy as np
import pytest
from scipy import stats

from protocols.mean import LaplaceMean, OneBitMean
from protocols.noise import GRID

from .protocol_checks import discrete_laplace_pvalue


def class_hiding_inputs(k: int, values=(-1.0, -0.4, 0.0, 0.7, 1.0)) -> np.ndarray:
    """Every class-hiding vector of length k with the value drawn from ``values``."""
    out = []
    for c in range(k):
        for v in values:
            x = np.zeros(k)
            x[c] = v
            out.append(x)
    return np.array(out)


def worst_log_ratio(mechanism, inputs: np.ndarray, outputs: np.ndarray) -> float:
    ll = np.stack([mechanism.log_likelihood(outputs, x) for x in inputs])
    return float((ll.max(axis=0) - ll.min(axis=0)).max())


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_class_hiding_laplace_is_exactly_epsilon_ldp(epsilon):
    k = 3
    mechanism = LaplaceMean(epsilon, k, sensitivity=2.0)
    grid = [-2.5, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0]
    outputs = np.array(list(itertools.product(grid, repeat=k)))
    ratio = worst_log_ratio(mechanism, class_hiding_inputs(k), outputs)
    assert ratio <= epsilon + 1e-9
    assert ratio == pytest.approx(epsilon)  # attained, e.g. by v = 1 against v = -1 at the same class


def test_approach_1_scales_the_noise_with_the_dimension_count():
    # Two coordinates' class-hiding vectors reported together: L1 sensitivity 2·2 = 4.
    r, k, epsilon = 2, 2, 1.0
    mechanism = LaplaceMean(epsilon, r * k, sensitivity=2.0 * r)
    assert mechanism.scale == pytest.approx(4.0)
    inputs = []
    for c in range(k):
        for v in itertools.product([-1.0, 1.0], repeat=r):
            x = np.zeros((r, k))
            x[:, c] = v
            inputs.append(x.ravel())
    outputs = np.array(list(itertools.product([-3.0, -1.0, 0.0, 1.0, 3.0], repeat=r * k)))
    assert worst_log_ratio(mechanism, np.array(inputs), outputs) == pytest.approx(epsilon)
    # With the per-coordinate scale instead, the same reports would be 2ε-LDP.
    too_little = LaplaceMean(epsilon, r * k, sensitivity=2.0)
    assert worst_log_ratio(too_little, np.array(inputs), outputs) == pytest.approx(2 * epsilon)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_one_bit_mechanism_is_exactly_epsilon_ldp(epsilon):
    dim = 4
    mechanism = OneBitMean(epsilon, dim)
    outputs = np.arange(2 * dim)
    inputs = np.array(list(itertools.product([-1.0, 0.0, 1.0], repeat=dim)))
    ratio = worst_log_ratio(mechanism, inputs, outputs)
    assert ratio == pytest.approx(epsilon)
    # The probabilities of every input sum to one over the outputs.
    for x in inputs[:5]:
        assert np.exp(mechanism.log_likelihood(outputs, x)).sum() == pytest.approx(1.0)


def test_laplace_mean_samples_from_its_distribution():
    mechanism = LaplaceMean(1.0, 3, 2.0)
    x = np.array([[0.0, 0.5, 0.0]])  # on the grid: no rounding
    reports = mechanism.perturb(np.repeat(x, 20_000, axis=0), np.random.default_rng(0))
    assert discrete_laplace_pvalue((reports - x).ravel(), mechanism.r) > 1e-4
    # Off the grid, the likelihood still sums to one over the outputs (rounding included).
    outputs = np.arange(-60_000, 60_001)[:, None] * GRID  # ±30 Laplace scales
    assert np.exp(mechanism.log_likelihood(outputs, np.array([0.3]))).sum() == pytest.approx(1.0, abs=1e-3)


def test_one_bit_samples_from_its_distribution():
    mechanism = OneBitMean(1.0, 3)
    x = np.array([0.5, -1.0, 0.0])
    reports = mechanism.perturb(np.tile(x, (30_000, 1)), np.random.default_rng(1))
    observed = np.bincount(reports, minlength=6)
    expected = np.exp(mechanism.log_likelihood(np.arange(6), x)) * len(reports)
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("mechanism", [LaplaceMean(1.0, 4, 2.0), OneBitMean(1.0, 4)], ids=["laplace", "onebit"])
def test_means_are_unbiased_within_their_variance(mechanism):
    rng = np.random.default_rng(2)
    m = 40_000
    # Class-hiding vectors: value at a class position, zeros elsewhere.
    values = np.zeros((m, 4))
    classes = rng.integers(0, 4, m)
    values[np.arange(m), classes] = rng.uniform(-1, 1, m) * 0.5 + 0.3
    truth = values.mean(axis=0)
    estimate = mechanism.estimate(mechanism.aggregate(mechanism.perturb(values, rng)))
    z = (estimate - truth) / np.sqrt(mechanism.variance(m))
    assert np.abs(z).max() < 4.5


def test_a_one_bit_mechanism_with_a_wrong_probability_is_caught():
    class Skewed(OneBitMean):
        def _p_one(self, v):
            e = math.exp(self.epsilon)
            return (np.asarray(v) * (e - 1) + e + 1) / (2 * e + 2) * 0.9 + 0.1

    broken = Skewed(1.0, 2)
    x = np.zeros(2)
    reports = broken.perturb(np.tile(x, (20_000, 1)), np.random.default_rng(3))
    honest = OneBitMean(1.0, 2)
    expected = np.exp(honest.log_likelihood(np.arange(4), x)) * len(reports)
    assert stats.chisquare(np.bincount(reports, minlength=4), expected).pvalue < 1e-6


def test_inputs_outside_the_unit_box_are_refused():
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        LaplaceMean(1.0, 2, 2.0).perturb(np.array([[1.5, 0.0]]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="shape"):
        OneBitMean(1.0, 2).perturb(np.zeros((3, 5)), np.random.default_rng(0))
