"""The Gaussian model's class variances against known truth: a bias that vanishes with the
reports, and a pooled variance weighed by the class prior."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.estimation.estimators import model_from_dict
from aggregator.estimation.gaussian import gaussian_estimator, shrunk_toward_pooled
from participant import CollectionSpec
from participant.continuous import ContinuousFeature, Preparation
from participant.encoding import population_inputs
from sim.experiment import simulate_collection

SPEC = CollectionSpec(
    [], ["a", "b"], "DE", 4.0, continuous=Preparation([ContinuousFeature("x", -1, 1)]), model="gaussian"
)


def minority_variances(ratio: float, n: int, reps: int, seed: int) -> tuple[float, np.ndarray]:
    """The minority class's (a fifth of the people) true variance and its estimates over ``reps``
    collections of ``n`` people, its variance ``ratio`` times the majority's 0.04 (ε = 4, approach 3)."""
    rng = np.random.default_rng(seed)
    truths, estimates = [], []
    for _ in range(reps):
        y = np.where(rng.random(n) < 0.2, "b", "a")
        x = np.clip(np.where(y == "b", rng.normal(-0.2, np.sqrt(0.04 * ratio), n), rng.normal(0.1, 0.2, n)), -1, 1)
        truths.append(x[y == "b"].var())
        stats = simulate_collection(SPEC, population_inputs(SPEC, x[:, None], y), rng, "fast")
        estimates.append(gaussian_estimator(stats).var[1, 0])
    return float(np.mean(truths)), np.array(estimates)


@pytest.mark.parametrize("ratio", [1 / 7, 1.0, 7.0])
def test_the_minority_variance_bias_falls_with_the_reports_and_stays_within_two_standard_errors(ratio):
    """80 collections each of 10^3 and 10^5 people: at 10^5 the bias is within two of the
    estimate's standard errors (its spread over the collections), and smaller than at 10^3. The
    pooled variance substituted wherever a variance was below twice its standard error, as before,
    biased the minority seven times below the pooled variance by 4.8 standard errors at 10^5
    (+476 %; research/gaussian_variance.py)."""
    truth, small = minority_variances(ratio, 1_000, 80, 1)
    truth_large, large = minority_variances(ratio, 100_000, 80, 2)
    bias_small, bias_large = small.mean() - truth, large.mean() - truth_large
    assert abs(bias_large) < 2 * large.std(ddof=1)
    assert abs(bias_large) < abs(bias_small)


def test_a_variance_that_cannot_be_told_from_the_pooled_one_takes_the_prior_weighted_pool():
    """Three classes (0.6, 0.3, 0.1) of one coordinate: the rare class's standard error is a
    hundred times its spread, so it takes the pooled variance, the classes' weighed by their prior
    (0.6·0.05 + 0.3·0.10 + 0.1·0.30 = 0.09; unweighted it would be 0.15), while the two measured
    classes keep their own."""
    prior = np.array([0.6, 0.3, 0.1])
    var = np.array([[0.05], [0.10], [0.30]])
    se = np.array([[1e-4], [1e-4], [10.0]])
    shrunk = shrunk_toward_pooled(var, se, prior)
    assert shrunk[2, 0] == pytest.approx(0.09, abs=1e-3)
    np.testing.assert_allclose(shrunk[:2, 0], [0.05, 0.10], rtol=1e-3)


def test_on_australian_the_model_beats_the_constant_classifier():
    """Australian at ε = 4 (approach 3, fast mode, ten splits): the default beats always answering
    the most common class by more than two standard errors of the paired difference (0.69 against
    0.56). Without the mean's variance in the model's, a class whose variance the noise drew near
    zero decided every prediction: 0.557, below the constant."""
    from sim.datasets import load_dataset
    from sim.experiment import Setup, run_once
    from sim.verdict import verdict

    data = load_dataset("australian", download=False)
    runs = [run_once(data, "DE", 4.0, seed, ("normsub",), setup=Setup("gaussian"), mode="fast") for seed in range(10)]
    found = verdict([r.accuracy["normsub"] for r in runs], [r.majority_accuracy for r in runs], 138)
    assert found.gain > 2 * found.se and found.gain > 0.05, found


@pytest.mark.parametrize("approach", [2, 3])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_the_reported_class_variance_is_unbiased_where_the_predictive_one_is_not(approach, epsilon):
    """A tenth of the people in a class whose variance is a twenty-fifth of the majority's
    (0.0025 against 0.0625), 10^5 people, 40 collections: the reported estimate of the minority's
    variance is within two standard errors (of the mean over the collections) of the truth, and
    its stated standard error matches its spread; the predictive variance the model classifies
    with (widened by the mean's noise, floored) is more than two standard errors above it, as it should
    be for prediction, which is why it is not reported as the estimate."""
    spec = CollectionSpec(
        [], ["a", "b"], "DE", epsilon, continuous=Preparation([ContinuousFeature("x", -1, 1)]), model="gaussian",
        approach=approach,
    )  # fmt: skip
    rng = np.random.default_rng(7)
    truths, estimates, errors, predictive = [], [], [], []
    for _ in range(40):
        y = np.where(rng.random(100_000) < 0.1, "b", "a")
        x = np.clip(np.where(y == "b", rng.normal(-0.2, 0.05, y.size), rng.normal(0.1, 0.25, y.size)), -1, 1)
        truths.append(x[y == "b"].var())
        model = gaussian_estimator(simulate_collection(spec, population_inputs(spec, x[:, None], y), rng, "fast"))
        estimates.append(model.variance_estimate[1, 0])
        errors.append(model.variance_se[1, 0])
        predictive.append(model.var[1, 0])
        assert model_from_dict(model.to_dict()).variance_estimate[1, 0] == estimates[-1]
    estimates, truth = np.array(estimates), float(np.mean(truths))
    standard_error = estimates.std(ddof=1) / np.sqrt(len(estimates))
    assert abs(estimates.mean() - truth) < 2 * standard_error
    assert 0.5 < np.mean(errors) / estimates.std(ddof=1) < 2
    assert np.mean(predictive) - truth > 2 * standard_error


@pytest.mark.parametrize("approach", [2, 3])
def test_the_class_variance_estimate_adds_back_what_the_squared_mean_overstates(approach):
    """Few people at a low ε (2,000 at ε = 0.5), 1,500 collections: the mean's own variance Var(θ̂)
    is about 0.2, many times the band the mean estimate is judged within, so the estimate is unbiased
    only with its ``+ Var(θ̂)`` term (``Ê[z²] − θ̂²`` alone lies far below the truth; issue 67)."""
    from aggregator.estimation.gaussian import class_means_and_noise

    spec = CollectionSpec(
        [], ["a", "b"], "DE", 0.5, continuous=Preparation([ContinuousFeature("x", -1, 1)]), model="gaussian",
        approach=approach,
    )  # fmt: skip
    rng = np.random.default_rng(3)
    truths, estimates, noise = [], [], []
    for _ in range(1500):
        y = np.where(rng.random(2000) < 0.5, "b", "a")
        x = np.clip(np.where(y == "b", rng.normal(-0.2, 0.3, y.size), rng.normal(0.3, 0.2, y.size)), -1, 1)
        truths.append(x[y == "b"].var())
        stats = simulate_collection(spec, population_inputs(spec, x[:, None], y), rng, "fast")
        estimates.append(gaussian_estimator(stats).variance_estimate[1, 0])
        noise.append(class_means_and_noise(stats)[2][1, 0])
    estimates, truth = np.array(estimates), float(np.mean(truths))
    standard_error = estimates.std(ddof=1) / np.sqrt(len(estimates))
    assert abs(estimates.mean() - truth) < 2 * standard_error
    assert np.mean(noise) > 10 * standard_error  # the term the test is there to catch


@pytest.mark.parametrize("approach", [1, 2, 3])
def test_the_reported_variance_error_covers_the_truth_on_a_small_wide_file(approach):
    """300 people, 32 coordinates in [-1, 1], epsilon 1, 30 collections (issue 68): the noise of
    each class mean exceeds the mean, and approach 3's class input gets one report in 65. The
    reported standard error counts what that costs (the squared mean's 2·Var(θ̂)² and the class
    prior's own noise), so the estimate lies beyond two of them from the true variance in 2 to 9 %
    of the cells, as a calibrated error does (4.7 to 4.9 %). Without those terms 11-35 % lay beyond,
    always above; with ``θ̂²`` for ``θ²`` in the error's ``4θ²·Var(θ̂)``, none (twice too wide)."""
    r, n = 32, 300
    spec = CollectionSpec(
        [], ["a", "b"], "DE", 1.0, continuous=Preparation([ContinuousFeature(f"x{i}", -1, 1) for i in range(r)]),
        model="gaussian", approach=approach,
    )  # fmt: skip
    rng = np.random.default_rng(5)
    beyond = cells = 0
    for _ in range(30):
        y = np.where(rng.random(n) < 0.5, "b", "a")
        x = np.clip(rng.normal(0.1, 0.3, (n, r)) + (y == "b")[:, None] * 0.2, -1, 1)
        truth = np.array([[x[y == c][:, j].var() for j in range(r)] for c in ("a", "b")])
        model = gaussian_estimator(simulate_collection(spec, population_inputs(spec, x, y), rng, "fast"))
        beyond += int((np.abs(model.variance_estimate - truth) > 2 * model.variance_se).sum())
        cells += truth.size
    assert 0.02 <= beyond / cells <= 0.09, beyond / cells
