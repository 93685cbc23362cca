"""The parametric bootstrap behind the temperature: what it draws is the model it was given, its
populations carry no more class signal than the reports, and the same reports always give the
same model."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator import CollectionStatistics, build_model
from aggregator.estimation.bootstrap import draw_statistics, sample_records
from aggregator.estimation.estimators import normsub_unsmoothed
from aggregator.estimation.model import NaiveBayesModel
from aggregator.estimation.smoothing import REFERENCE
from participant import CollectionSpec, Feature
from sim.datasets import load_dataset
from sim.experiment import runner_for

from .conftest import skewed_class_independent

PRIOR = np.array([0.2, 0.8])
CONDITIONALS = [np.array([[0.1, 0.2, 0.7], [0.5, 0.3, 0.2]]), np.array([[0.6, 0.4], [0.25, 0.75]])]


def known_model(spec: CollectionSpec) -> NaiveBayesModel:
    return NaiveBayesModel(spec, PRIOR * 1000, [t * 1000 for t in CONDITIONALS])


def spec_of(protocol: str, epsilon: float) -> CollectionSpec:
    return CollectionSpec([Feature("f", ["x", "y", "z"]), Feature("g", ["u", "v"])], ["a", "b"], protocol, epsilon)


@pytest.mark.parametrize("protocol", ["DE", "OUE"])
def test_drawn_collections_estimate_the_models_joint_in_a_k_plus_c_order(protocol):
    """400 draws of 20,000 reports per input at ε = 2: every estimated count's mean lies within
    five standard errors of n·P(c)·P(a|c) (a class-major order, c·n_i + a, misses by hundreds)."""
    spec = spec_of(protocol, 2.0)
    model = known_model(spec)
    like = CollectionStatistics(spec)
    for state in like.states:
        state.n = 20_000
    rng = np.random.default_rng(11)
    draws = np.array([np.concatenate(draw_statistics(model, like, rng).estimated_counts()) for _ in range(400)])
    truth = np.concatenate([PRIOR * 20_000] + [(PRIOR[:, None] * t).T.ravel() * 20_000 for t in CONDITIONALS])
    standard_error = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - truth) < 5 * standard_error)


def test_sampled_records_follow_the_model_and_carry_its_posterior():
    model = known_model(spec_of("DE", 1.0))
    codes, posterior = sample_records(model, 40_000, np.random.default_rng(2))
    jll = np.log(PRIOR) + np.log(CONDITIONALS[0][:, codes[:, 0]].T) + np.log(CONDITIONALS[1][:, codes[:, 1]].T)
    expected = np.exp(jll) / np.exp(jll).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(posterior, expected, rtol=1e-9)
    # The records' classes are not returned; the features' marginals and their pairs show the draw
    # (40,000 records: standard errors below 0.0025).
    np.testing.assert_allclose(np.bincount(codes[:, 0], minlength=3) / len(codes), PRIOR @ CONDITIONALS[0], atol=0.01)
    np.testing.assert_allclose(np.bincount(codes[:, 1], minlength=2) / len(codes), PRIOR @ CONDITIONALS[1], atol=0.01)
    pairs = np.bincount(codes[:, 0] * 2 + codes[:, 1], minlength=6) / len(codes)
    np.testing.assert_allclose(pairs, np.einsum("c,ca,cb->ab", PRIOR, *CONDITIONALS).ravel(), atol=0.01)


def test_the_same_reports_give_the_same_model_and_the_default_strength_is_one():
    runner = runner_for(load_dataset("car"))
    spec = runner.spec("auto", 1.0, None, "one-report")
    stats = runner._fast_statistics(spec, 3, np.random.default_rng(3))
    first, second = build_model(stats, "normsub"), build_model(stats, "normsub")
    for a, b in zip(first.category_count, second.category_count):
        np.testing.assert_array_equal(a, b)
    assert build_model(CollectionStatistics(spec), "normsub").strength == REFERENCE == 1.0


def test_features_smoothed_together_equal_each_smoothed_alone():
    """The bootstrap smooths the features of one shape as one array; each equals its own smoothing
    (tables of two shapes, an empty row, strengths 1 and 8)."""
    from aggregator.estimation.smoothing import Unsmoothed, smooth_conditionals

    rng = np.random.default_rng(9)
    tables = [rng.uniform(0, 50, (3, 4)), rng.uniform(0, 50, (3, 2)), rng.uniform(0, 50, (3, 4))]
    tables[2][1] = 0.0
    variances = [40.0, 9.0, 400.0]
    together = Unsmoothed(np.array([5.0, 3.0, 2.0]), tables, variances).log_probabilities(np.array([1.0, 8.0]))
    for table, variance, log_prob in zip(tables, variances, together):
        for j, strength in enumerate((1.0, 8.0)):
            alone = smooth_conditionals(table, variance, strength)
            np.testing.assert_allclose(log_prob[j], np.log(alone / alone.sum(axis=1, keepdims=True)), rtol=1e-12)


def class_signal(model: NaiveBayesModel) -> float:
    """Σ over features and classes of P(c)·‖P(·|c) − P(·)‖²: how far the classes' conditionals
    stand apart, zero for a feature that tells classes nothing."""
    prior = model.class_prior
    total = 0.0
    for log_table in model.feature_log_prob:
        table = np.exp(log_table)
        total += float(prior @ ((table - prior @ table) ** 2).sum(axis=1))
    return total


def test_the_bootstrap_draws_from_a_population_with_no_more_signal_than_the_real_one():
    """A known population of car's shape (4 classes, 0.70 of them one class; six features of 3 or 4
    values) and car's size (1,400 people, one report each) at ε = 1, 60 collections: the plug-in
    truth's class signal is on average below the population's (a posterior mean shrinks: 0.77 of
    it), so the bootstrap does not reward weak smoothing for noise. Drawing from the smoothed model
    itself (the earlier plug-in, strength 0.6) gave 1.38 times the real signal."""
    from aggregator.estimation.bootstrap import plug_in_truth

    rng = np.random.default_rng(5)
    features = [Feature(f"f{i}", [f"v{j}" for j in range(3 + i % 2)]) for i in range(6)]
    spec = CollectionSpec(features, ["a", "b", "c", "d"], "auto", 1.0)
    prior = np.array([0.70, 0.22, 0.04, 0.04])
    conditionals = [rng.dirichlet(np.full(len(f.categories), 3.0), size=4) for f in features]
    truth = NaiveBayesModel(spec, prior * 1e6, [t * 1e6 for t in conditionals])
    like = CollectionStatistics(spec)
    for state in like.states:
        state.n = 200
    signals = [
        class_signal(plug_in_truth(drawn, normsub_unsmoothed(drawn)))
        for drawn in (draw_statistics(truth, like, rng) for _ in range(60))
    ]
    assert np.mean(signals) < class_signal(truth)


def test_toward_the_marginal_the_bootstrap_draws_from_a_population_without_false_class_signal():
    """One skewed feature of 64 values that tells the classes nothing (a fifth of the people in
    class b), OUE at ε = 1, 20,000 people per input, ten collections: the plug-in truth of the
    ``marginal`` estimator carries a class signal of 0.0002 on average, its uniform counterpart
    0.0031 (the classes pulled toward uniform by different weights). A plug-in that shrinks toward
    uniform for the ``marginal`` estimator would draw the bootstrap's collections from that false
    signal, where weak smoothing looks better than it is (connect-4 at ε = 1: 0.641 against
    0.654)."""
    from aggregator.estimation.bootstrap import plug_in_truth

    truth, like = skewed_class_independent(20_000)
    rng = np.random.default_rng(1)
    signals = {"uniform": [], "marginal": []}
    for _ in range(10):
        drawn = draw_statistics(truth, like, rng)
        for target, found in signals.items():
            found.append(class_signal(plug_in_truth(drawn, normsub_unsmoothed(drawn, target))))
    assert np.mean(signals["marginal"]) < 0.001 < np.mean(signals["uniform"])
