import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from protocols import (
    FREQUENCY_ORACLES,
    DirectEncoding,
    OptimisedUnaryEncoding,
    OracleState,
    SymmetricUnaryEncoding,
    ThresholdHistogramEncoding,
    make_oracle,
    optimal_theta,
)
from protocols.noise import (
    GRID,
    discrete_laplace,
    discrete_laplace_log_pmf,
    discrete_laplace_sf,
    discrete_laplace_variance,
    grid_log_likelihood,
    grid_ratio,
    round_to_grid,
    sum_of_discrete_laplace,
)

from .protocol_checks import (
    TRUE_COUNTS,
    discrete_laplace_pvalue,
    empirical_variance_ratio,
    estimate_z_scores,
    sampling_pvalue,
    worst_log_ratio,
)

PROTOCOLS = list(FREQUENCY_ORACLES)
# Bound on |z| for 6 cells: two-sided 4.5 sigma, a false alarm about once in 20,000 runs.
Z_BOUND = 4.5


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_worst_case_ratio_is_exactly_e_to_the_epsilon(protocol, epsilon):
    oracle = make_oracle(protocol, epsilon, 3)
    ratio = worst_log_ratio(oracle)
    assert ratio <= epsilon + 1e-9
    # Every protocol here spends its whole budget: the bound is attained, not just respected.
    assert ratio == pytest.approx(epsilon, rel=1e-9)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_perturb_samples_from_the_declared_distribution(protocol):
    oracle = make_oracle(protocol, 1.0, 4)
    for value in (0, 3):
        assert sampling_pvalue(oracle, value) > 1e-4


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_estimates_fall_within_variance_bounds(protocol, epsilon):
    z = estimate_z_scores(make_oracle(protocol, epsilon, len(TRUE_COUNTS)))
    assert np.abs(z).max() < Z_BOUND
    assert (z**2).sum() < stats.chi2.ppf(1 - 1e-5, len(z))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_variance_formula_matches_repeated_collections(protocol):
    ratio = empirical_variance_ratio(make_oracle(protocol, 1.0, len(TRUE_COUNTS)))
    # 300 repeats: the sample variance has relative sd sqrt(2/299) = 0.08; 4 sd either side.
    assert np.all((ratio > 0.67) & (ratio < 1.33)), ratio


def test_parameters_match_section_2_2_1():
    e = math.exp(1.0)
    de = DirectEncoding(1.0, 5)
    assert (de.p, de.q) == pytest.approx((e / (e + 4), 1 / (e + 4)))
    sue = SymmetricUnaryEncoding(1.0, 5)
    assert (sue.p, sue.q) == pytest.approx((math.sqrt(e) / (math.sqrt(e) + 1), 1 / (math.sqrt(e) + 1)))
    oue = OptimisedUnaryEncoding(1.0, 5)
    assert (oue.p, oue.q) == pytest.approx((0.5, 1 / (e + 1)))
    the = ThresholdHistogramEncoding(1.0, 5, theta=0.25)
    # The paper's Pr[1 + Lap(2) > 0.25] and Pr[Lap(2) > 0.25], up to the grid's discretisation...
    assert the.p == pytest.approx(stats.laplace(loc=1, scale=2).sf(0.25), rel=2e-3)
    assert the.q == pytest.approx(stats.laplace(scale=2).sf(0.25), rel=2e-3)
    # ...and exactly the grid noise's probabilities, summed term by term.
    k = np.arange(-200_000, 200_001)
    pmf = np.exp(discrete_laplace_log_pmf(k, the.r))
    assert the.p == pytest.approx(pmf[1 + k * GRID > 0.25].sum(), rel=1e-9)
    assert the.q == pytest.approx(pmf[k * GRID > 0.25].sum(), rel=1e-9)
    assert make_oracle("THE", 1.0, 5).theta == optimal_theta(1.0)  # the variance-optimal default


def test_states_merge_exactly():
    oracle = make_oracle("OUE", 1.0, 8)
    rng = np.random.default_rng(5)
    reports = oracle.perturb(rng.integers(0, 8, 1000), rng)
    merged = oracle.aggregate(reports[:300]) + oracle.aggregate(reports[300:])
    whole = oracle.aggregate(reports)
    assert merged.n == whole.n == 1000
    np.testing.assert_array_equal(merged.support, whole.support)
    with pytest.raises(ValueError, match="domain sizes"):
        merged + OracleState.empty(4)


def test_invalid_parameters_are_refused():
    with pytest.raises(ValueError, match="epsilon"):
        make_oracle("DE", 0.0, 4)
    with pytest.raises(ValueError, match="domain_size"):
        make_oracle("DE", 1.0, 1)
    with pytest.raises(ValueError, match="unknown protocol"):
        make_oracle("RAPPOR", 1.0, 4)
    with pytest.raises(ValueError, match="theta"):
        make_oracle("THE", 1.0, 4, theta=1.5)
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        make_oracle("DE", 1.0, 4).perturb(np.array([4]), np.random.default_rng(0))


def test_discrete_laplace_sampler_has_its_distribution():
    r = grid_ratio(1.0, 2.0)
    draws = discrete_laplace(np.random.default_rng(0), r, 100_000)
    assert draws.dtype == np.int64
    assert discrete_laplace_pvalue(draws * GRID, r) > 1e-4
    assert draws.var() == pytest.approx(discrete_laplace_variance(r), rel=0.03)
    sums = sum_of_discrete_laplace(np.random.default_rng(1), r, 50, 20_000)
    assert sums.var() == pytest.approx(50 * discrete_laplace_variance(r), rel=0.05)


def test_reports_with_real_numbers_lie_on_the_grid():
    rng = np.random.default_rng(2)
    for oracle in (make_oracle("SHE", 0.7, 5), make_oracle("THE", 3.0, 5)):
        steps = oracle.perturb(rng.integers(0, 5, 2000), rng) / GRID
        assert np.array_equal(steps, np.round(steps))
    rounded = round_to_grid(rng, np.full(200_000, 0.3))
    assert set(np.unique(rounded)) == {307 * GRID, 308 * GRID}
    assert rounded.mean() == pytest.approx(0.3, abs=4 * GRID / np.sqrt(200_000))


# Deliberately broken protocols: the checks above must catch each of them.


class TrueBitTooOften(OptimisedUnaryEncoding):
    """Reports the true bit as 1 with probability 0.7 while the estimator assumes p = 0.5."""

    def perturb(self, values, rng):
        bits = rng.random((len(values), self.domain_size)) < self.q
        bits[np.arange(len(values)), values] = rng.random(len(values)) < 0.7
        return bits


class OverconfidentSUE(SymmetricUnaryEncoding):
    """Uses e^ε instead of e^{ε/2} for SUE's p: accurate, but only 2ε-LDP."""

    @property
    def p(self):
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + 1)

    @property
    def q(self):
        return 1 - self.p


class WrongDirectEncoding(DirectEncoding):
    """Keeps the true value with probability e^ε/(e^ε + 1), ignoring the domain size."""

    def perturb(self, values, rng):
        other = rng.integers(0, self.domain_size - 1, size=len(values))
        other += other >= values
        e = math.exp(self.epsilon)
        return np.where(rng.random(len(values)) < e / (e + 1), values, other)


def test_a_wrong_true_bit_probability_fails_sampling_and_estimation():
    broken = TrueBitTooOften(1.0, 4)
    assert sampling_pvalue(broken, 0) < 1e-6
    assert np.abs(estimate_z_scores(TrueBitTooOften(1.0, len(TRUE_COUNTS)))).max() > Z_BOUND


def test_a_wrong_direct_encoding_fails_sampling_and_estimation():
    assert sampling_pvalue(WrongDirectEncoding(1.0, 4), 0) < 1e-6
    assert np.abs(estimate_z_scores(WrongDirectEncoding(1.0, len(TRUE_COUNTS)))).max() > Z_BOUND


def test_an_over_budget_protocol_fails_the_privacy_ratio():
    assert worst_log_ratio(OverconfidentSUE(1.0, 3)) == pytest.approx(2.0)


def test_discrete_laplace_tail_variance_and_grid_likelihood_against_the_pmf_summed():
    """The closed forms against sums of the pmf (written here: (1-r)/(1+r)·r^|k|) over a range
    that holds all but r^4000 of the mass."""
    r = 0.99
    k = np.arange(-4000, 4001)
    pmf = (1 - r) / (1 + r) * r ** np.abs(k)
    np.testing.assert_allclose(np.exp(discrete_laplace_log_pmf(k, r)), pmf, rtol=1e-12)
    assert discrete_laplace_variance(r) == pytest.approx((pmf * k**2).sum(), rel=1e-9)
    for m in (-3, 0, 1, 2, 7):
        assert discrete_laplace_sf(m, r) == pytest.approx(pmf[k >= m].sum(), rel=1e-9), m
    # Grid noise around a grid centre: a distribution over grid outputs, centred on the centre.
    centre = np.array([5 * GRID, -2 * GRID])
    outputs = np.stack([centre[0] + k * GRID, np.full(k.size, centre[1])], axis=1)
    logp = grid_log_likelihood(outputs, centre, r)
    assert logp.shape == (k.size,)
    p = np.exp(logp - discrete_laplace_log_pmf(0, r))  # the second coordinate sits at its centre
    assert p.sum() == pytest.approx(1.0, abs=1e-9) and (p * outputs[:, 0]).sum() == pytest.approx(centre[0], abs=1e-9)
    assert grid_log_likelihood(centre + [GRID / 1000, 0.0], centre, r) == -np.inf
    assert grid_log_likelihood(centre + [GRID / 2, 0.0], centre, r) == -np.inf


def test_a_sum_of_one_discrete_laplace_draw_is_one_draw():
    rng = np.random.default_rng(4)
    r = 0.8
    draws = sum_of_discrete_laplace(rng, r, 1, 40_000)
    assert draws.var() == pytest.approx(discrete_laplace_variance(r), rel=0.05)
    assert sum_of_discrete_laplace(rng, r, 0, 3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("protocol", ["DE", "SUE", "OUE", "SHE", "THE"])
def test_simulated_states_count_every_person_with_float_supports(protocol):
    oracle = make_oracle(protocol, 1.0, 4)
    counts = [3, 0, 5, 2]  # a list, as callers pass it
    state = oracle.simulate_counts(counts, np.random.default_rng(0))
    assert state.n == 10 and type(state.n) is int
    assert state.support.dtype == np.float64 and state.support.shape == (4,)
    empty = OracleState.empty(4)
    assert empty.n == 0 and empty.support.dtype == np.float64 and not empty.support.any()


@pytest.mark.parametrize("theta", [0.0, 1.0, -0.1, 1.5])
def test_the_threshold_must_lie_strictly_between_0_and_1(theta):
    with pytest.raises(ValueError, match="theta"):
        ThresholdHistogramEncoding(1.0, 4, theta)
    assert ThresholdHistogramEncoding(1.0, 4).theta == optimal_theta(1.0)  # not Wang et al.'s 0.25


def test_the_threshold_counts_reports_strictly_above_it():
    # Reports are grid points, and θ = 0.25 is one: a report exactly at θ must not count, as in
    # the p and q that the estimator divides by (P(report > θ)).
    oracle = ThresholdHistogramEncoding(1.0, 3, theta=0.25)
    reports = np.array([[0.25, 0.25 + GRID, 1.0], [0.25 - GRID, 0.25, 0.0]])
    assert oracle.support(reports).tolist() == [0.0, 1.0, 1.0]


def test_simulated_histogram_noise_is_independent_across_values():
    oracle = make_oracle("SHE", 1.0, 3)
    rng = np.random.default_rng(8)
    supports = np.array([oracle.simulate_counts([10, 0, 5], rng).support for _ in range(400)])
    correlation = np.corrcoef(supports.T)[np.triu_indices(3, 1)]
    assert np.abs(correlation).max() < 0.2  # 400 draws: |r| of independent ones is below 0.2 w.p. > 0.999


@pytest.mark.parametrize("values", [np.array([0.0, 1.0]), np.array([[0, 1]]), np.array(["0"])])
def test_oracles_take_a_flat_array_of_integers_only(values):
    for protocol in ("DE", "OUE", "SHE"):
        with pytest.raises(ValueError, match="^values must be a 1-d array of integers$"):
            make_oracle(protocol, 1.0, 4).perturb(values, np.random.default_rng(0))


def test_protocol_refusals_word_for_word():
    from protocols.exact import exp_lower
    from protocols.mean import LaplaceMean, OneBitMean

    cases = [
        (lambda: make_oracle("XYZ", 1.0, 4), "unknown protocol 'XYZ'; choose one of " + ", ".join(FREQUENCY_ORACLES)),
        (lambda: make_oracle("DE", 1.0, 1), "domain_size must be an integer >= 2, got 1"),
        (lambda: make_oracle("DE", float("nan"), 4), "epsilon must be a finite number > 0, got nan"),
        (lambda: make_oracle("DE", 1.0, 4).perturb(np.array([4]), None), "values must lie in [0, 3]"),
        (lambda: ThresholdHistogramEncoding(1.0, 4, 1.0), "theta must lie in (0, 1), got 1.0"),
        (lambda: LaplaceMean(1.0, 2, 2.0).perturb(np.zeros((1, 3)), None), "values must have shape (m, 2), got (1, 3)"),
        (
            lambda: LaplaceMean(1.0, 2, 2.0).perturb(np.full((1, 2), 1.5), None),
            "values must be finite and lie in [-1, 1]",
        ),
        (lambda: OneBitMean(1.0, 0), "dim must be a positive integer, got 0"),
        (lambda: LaplaceMean(1.0, 0, 2.0), "dim must be a positive integer, got 0"),
        (lambda: LaplaceMean(1.0, 2, 0.0), "sensitivity must be > 0, got 0.0"),
        (lambda: exp_lower(Fraction(-1)), "exp_lower takes x >= 0"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message
