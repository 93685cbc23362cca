import itertools
import math

import numpy as np
import pytest
from scipy import stats

from protocols import OracleState
from protocols.mean import LaplaceMean, OneBitMean
from protocols.noise import GRID, discrete_laplace_variance, grid_log_likelihood

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


def test_the_laplace_likelihood_is_a_distribution_centred_on_the_value():
    """Summed over every grid report, the likelihood of a value between grid points is 1 and its
    mean report is the value itself (randomised rounding and the noise are both unbiased)."""
    mechanism = LaplaceMean(8.0, 1, 2.0)  # noise of scale 256 grid steps
    steps = np.arange(-20_000, 20_001)
    reports = (steps * GRID)[:, None]
    for value in (0.3, -0.7 + GRID / 3, 0.0):
        p = np.exp(mechanism.log_likelihood(reports, np.array([value])))
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert (p * reports[:, 0]).sum() == pytest.approx(value, abs=1e-9)
    # Off the grid a report is impossible; two coordinates' likelihoods add.
    assert mechanism.log_likelihood(np.array([[GRID * 1e-3]]), np.array([0.0]))[0] == -np.inf
    assert mechanism.log_likelihood(np.array([[0.5 + GRID / 2]]), np.array([0.5]))[0] == -np.inf
    two = LaplaceMean(8.0, 2, 2.0)
    pair = two.log_likelihood(np.array([[3 * GRID, -5 * GRID]]), np.array([0.1, 0.2]))
    single = [
        mechanism.log_likelihood(np.array([[r]]), np.array([v]))[0] for r, v in ((3 * GRID, 0.1), (-5 * GRID, 0.2))
    ]
    assert pair.shape == (1,) and pair[0] == pytest.approx(sum(single), rel=1e-12)


def test_mean_mechanism_variances_match_simulated_estimates():
    """5,000 populations of 20: the estimate's variance against :meth:`variance` (exact for values
    midway between grid points, where rounding adds its full GRID²/4, and for the one-bit
    mechanism at zero); 5,000 draws give the variance within 8 % with probability > 0.999."""
    rng = np.random.default_rng(21)
    laplace = LaplaceMean(50.0, 2, 2.0)  # little noise, so the rounding's share shows
    midway = np.full((20, 2), 0.25 + GRID / 2)
    estimates = np.array([laplace.estimate(laplace.simulate(midway, rng)) for _ in range(5000)])
    np.testing.assert_allclose(estimates.var(axis=0, ddof=1) / laplace.variance(20), 1.0, atol=0.08)
    np.testing.assert_allclose(
        estimates.mean(axis=0), 0.25 + GRID / 2, atol=4 * np.sqrt(laplace.variance(20)[0] / 5000)
    )
    one_bit = OneBitMean(0.5, 3)
    zeros = np.zeros((20, 3))
    estimates = np.array([one_bit.estimate(one_bit.aggregate(one_bit.perturb(zeros, rng))) for _ in range(5000)])
    np.testing.assert_allclose(estimates.var(axis=0, ddof=1) / one_bit.variance(20), 1.0, atol=0.08)
    for mechanism in (laplace, one_bit):
        assert mechanism.variance(0).tolist() == mechanism.variance(1).tolist()
        np.testing.assert_allclose(mechanism.variance(1), 7 * mechanism.variance(7), rtol=1e-12)
        assert mechanism.estimate(OracleState.empty(mechanism.state_size)).tolist() == [0.0] * mechanism.dim


def test_far_from_zero_a_half_step_is_still_off_the_grid():
    # 200,000.5 grid steps: a relative tolerance would call it a grid point.
    mechanism = LaplaceMean(1.0, 1, 2.0)
    far = np.array([[200_000.5 * GRID]])
    assert mechanism.log_likelihood(far, np.array([0.0]))[0] == -np.inf
    assert grid_log_likelihood(far[0], np.array([0.0]), mechanism.r) == -np.inf
    assert np.isfinite(mechanism.log_likelihood(np.array([[200_000 * GRID]]), np.array([0.0]))[0])


def test_mean_mechanism_parameters_are_checked_and_the_variance_bound_is_its_formula():
    for bad in ((0, 2.0), (1.5, 2.0), (2, 0.0), (2, -1.0)):
        with pytest.raises(ValueError):
            LaplaceMean(1.0, *bad)
    for bad in (0, 1.5):
        with pytest.raises(ValueError):
            OneBitMean(1.0, bad)
    assert OneBitMean(1.0, 1).dim == 1 and LaplaceMean(1.0, 1, 0.5).dim == 1
    # The documented bound: grid noise plus at most a quarter grid step squared from rounding.
    mechanism = LaplaceMean(50.0, 2, 2.0)
    assert mechanism.variance(1)[0] / GRID**2 == pytest.approx(discrete_laplace_variance(mechanism.r) + 0.25, rel=1e-12)


def test_simulated_mean_noise_is_independent_across_coordinates():
    mechanism = LaplaceMean(1.0, 3, 2.0)
    rng = np.random.default_rng(3)
    states = np.array([mechanism.simulate(np.zeros((10, 3)), rng).support for _ in range(400)])
    assert np.abs(np.corrcoef(states.T)[np.triu_indices(3, 1)]).max() < 0.2


def test_a_grid_point_within_a_millionth_of_a_step_is_on_the_grid():
    # Arithmetic on a report's way (a unit conversion, a decimal printed short) can leave it a hair off its
    # grid point: within a millionth of a step it still counts as the grid point.
    mechanism = LaplaceMean(1.0, 1, 2.0)
    for offset, on_grid in ((5e-7, True), (-5e-7, True), (2e-6, False)):
        report = np.array([(3 + offset) * GRID])
        assert np.isfinite(grid_log_likelihood(report, np.array([0.0]), mechanism.r)) == on_grid, offset
        assert np.isfinite(mechanism.log_likelihood(report[None, :], np.array([0.0]))[0]) == on_grid, offset
