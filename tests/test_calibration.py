"""The temperature of the model's class probabilities (aggregator.estimation.calibration): it softens a model
whose many noisy features make it sure of nothing it knows, leaves a well-measured one alone,
never changes a prediction, and travels with the model to scikit-learn and back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

from aggregator import build_model
from aggregator.estimation.bootstrap import sample_records
from aggregator.estimation.calibration import (
    MARGIN,
    TEMPERATURES,
    bootstrap_log_losses,
    choose_temperature,
    convex_argmin,
    expected_log_loss,
    pick,
)
from aggregator.estimation.dependence import dependence_p_value, null_probability
from aggregator.estimation.estimators import normsub_unsmoothed
from aggregator.estimation.model import NaiveBayesModel
from aggregator.estimation.smoothing import REFERENCE
from participant import CollectionSpec, Feature
from sim.datasets import load_dataset
from sim.experiment import DEFAULT_THETA, runner_for
from sim.synthetic import known_model_statistics


def true_log_loss(model: NaiveBayesModel, truth: NaiveBayesModel, records: int = 4000) -> float:
    """The model's expected log-loss (nats per record) at its temperature on records drawn from
    ``truth``, against ``truth``'s class probabilities."""
    codes, posterior = sample_records(truth, records, np.random.default_rng(0))
    jll = model.temperature * model.joint_log_likelihood_codes(codes)
    return float(-(posterior * (jll - logsumexp(jll, axis=1, keepdims=True))).sum(axis=1).mean())


def population(features: int, values: int, prior, signal: np.ndarray | None, protocol: str, epsilon: float):
    """A spec and a known population over it: ``signal`` the conditional table every feature
    shares (``(k, values)``), or None for features that tell the classes nothing."""
    k = len(prior)
    spec = CollectionSpec(
        [Feature(f"f{i}", [str(v) for v in range(values)]) for i in range(features)],
        [str(c) for c in range(k)],
        protocol,
        epsilon,
    )
    if signal is None:
        shares = np.linspace(2, 1, values)
        signal = np.tile(shares / shares.sum(), (k, 1))
    conditionals = [signal] * features
    return spec, conditionals, NaiveBayesModel(spec, np.asarray(prior) * 1000, [t * 1000 for t in conditionals])


def test_expected_log_loss_is_the_cross_entropy_of_the_tempered_posterior():
    rng = np.random.default_rng(3)
    jll = rng.normal(scale=5, size=(50, 3))
    posterior = rng.dirichlet(np.ones(3), size=50)
    temperatures = np.array([1.0, 0.5, 0.1])
    expected = [-(posterior * np.log(softmax(t * jll, axis=1))).sum(axis=1).mean() for t in temperatures]
    np.testing.assert_allclose(expected_log_loss(jll, posterior, temperatures), expected, rtol=1e-12)


@pytest.mark.parametrize("least", [0, 1, 12, 23, 24])
def test_the_bisection_finds_the_least_of_a_convex_sequence_anywhere(least):
    calls = []

    def score(i: int) -> float:
        calls.append(i)
        return (i - least) ** 2 + 0.1 * i

    assert convex_argmin(score, 25) == least
    assert len(calls) <= 2 * 5
    assert convex_argmin(lambda i: 1.0, 25) == 0  # flat: the first


def test_a_softer_temperature_must_save_the_margin():
    temperatures = np.array([1.0, 0.5, 0.25])
    assert pick(np.array([1.0, 1.0 - 0.8 * MARGIN, 1.0 - 0.9 * MARGIN]), temperatures) == 1.0
    assert pick(np.array([1.0, 1.0 - 2 * MARGIN, 1.0 - MARGIN]), temperatures) == 0.5
    assert pick(np.array([1.0, 1.0 - MARGIN, 0.5]), temperatures) == 0.25
    assert pick(np.array([1.0, 1.2, 1.5]), temperatures) == 1.0


@pytest.mark.parametrize(("name", "epsilon"), [("car", 0.5), ("car", 4.0), ("chess", 1.0), ("mushroom", 2.0)])
def test_the_search_takes_what_every_temperatures_score_would(name, epsilon):
    """The bisection on the convex score picks what :func:`pick` takes from all 25 scores."""
    runner = runner_for(load_dataset(name, download=False))
    for seed in range(3):
        stats = runner.statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, "fast")
        base = normsub_unsmoothed(stats)
        strength = REFERENCE
        weight = null_probability(dependence_p_value(stats, base.class_count))
        scores = [
            bootstrap_log_losses(stats, normsub_unsmoothed, base, strength, w) for w in ("null", "spread-matched")
        ]
        every = pick(weight * scores[0] + (1 - weight) * scores[1])
        assert choose_temperature(stats, normsub_unsmoothed, base, strength) == every


def test_forty_noisy_features_without_signal_are_softened_toward_knowing_nothing():
    """40 three-valued features independent of two even classes, 4,000 people at ε = 0.5 (DE):
    smoothed at strength 1 and temperature 1 the model's summed noise costs 1.34 nats a record
    where knowing nothing costs log 2 = 0.69; the chosen temperature (below 0.4 on every seed)
    brings it within 0.1 of that, as does the default model (whose strength the reports choose)."""
    spec, conditionals, truth = population(40, 3, [0.5, 0.5], None, "DE", 0.5)
    for seed in range(4):
        stats = known_model_statistics(spec, [0.5, 0.5], conditionals, 4000, np.random.default_rng(seed))
        model = build_model(stats, strength=1.0)
        sharp = build_model(stats, strength=1.0, temperature=1.0)
        assert model.temperature < 0.4
        assert true_log_loss(sharp, truth) > 1.0
        assert true_log_loss(model, truth) < np.log(2) + 0.1
        assert true_log_loss(build_model(stats), truth) < np.log(2) + 0.1


def test_a_well_measured_model_keeps_temperature_one():
    """Four strong features, 50,000 people at ε = 4: the model is about right, and no softer
    temperature saves the margin."""
    signal = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    spec, conditionals, _ = population(4, 3, [0.7, 0.3], signal, "OUE", 4.0)
    for seed in range(3):
        stats = known_model_statistics(spec, [0.7, 0.3], conditionals, 50_000, np.random.default_rng(seed))
        assert build_model(stats).temperature == 1.0


def test_connect4_at_low_epsilon_is_no_longer_sure_of_the_wrong_class():
    """connect-4 at ε = 0.5 (42 dependent features, three classes): every model predicts what it
    did at temperature 1, but its log-loss on the test rows falls from above 1.5 nats to below 1.2
    (the class prior alone: 0.85)."""
    runner = runner_for(load_dataset("connect-4", download=False))
    setting = ("auto", 0.5, DEFAULT_THETA, "one-report")
    for seed in range(3):
        stats = runner.statistics(setting, seed, "fast")
        tempered, sharp = build_model(stats), build_model(stats, temperature=1.0)
        accuracy, loss = runner._score([tempered, sharp], seed)
        assert tempered.temperature < 0.5
        assert accuracy[0] == accuracy[1]
        assert loss[1] > 1.5 and loss[0] < 1.2


def test_an_estimator_that_takes_the_statistics_alone_still_builds_at_a_given_temperature(monkeypatch):
    """A simulation that scores accuracy alone asks for temperature 1; an estimator registered
    beside the shipped ones (a bench's variant) that takes no temperature is built as it is."""
    from aggregator.estimation import estimators

    spec, conditionals, _ = population(3, 3, [0.6, 0.4], None, "OUE", 1.0)
    stats = known_model_statistics(spec, [0.6, 0.4], conditionals, 500, np.random.default_rng(0))
    monkeypatch.setitem(
        estimators.ESTIMATORS, "variant", lambda s: estimators.normsub_estimator(s, 1.0, temperature=0.5)
    )
    assert build_model(stats, "variant", temperature=1.0).temperature == 0.5
    assert build_model(stats, "normsub", temperature=1.0).temperature == 1.0


def test_the_temperature_changes_no_prediction_and_travels_with_the_model():
    signal = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]])
    spec, conditionals, _ = population(3, 3, [0.6, 0.4], signal, "OUE", 1.0)
    counts = [t * 500 for t in conditionals]
    model = NaiveBayesModel(spec, [600, 400], counts, temperature=TEMPERATURES[4])
    sharp = NaiveBayesModel(spec, [600, 400], counts)
    X = np.array([[str(v) for v in row] for row in np.random.default_rng(1).integers(3, size=(200, 3))], dtype=object)
    np.testing.assert_array_equal(model.predict(X), sharp.predict(X))
    codes = np.array([[int(v) for v in row] for row in X])
    expected = softmax(TEMPERATURES[4] * sharp.joint_log_likelihood_codes(codes), axis=1)
    np.testing.assert_allclose(model.predict_proba(X), expected, rtol=1e-10)
    assert np.abs(model.predict_proba(X) - sharp.predict_proba(X)).max() > 0.05
    np.testing.assert_allclose(model.to_sklearn().predict_proba(codes), expected, rtol=1e-10)
    np.testing.assert_array_equal(model.to_sklearn().predict(codes), model.predict(X))
    again = NaiveBayesModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again.temperature == model.temperature
    legacy = {key: value for key, value in model.to_dict().items() if key != "temperature"}
    assert NaiveBayesModel.from_dict(legacy).temperature == 1.0
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="temperature"):
            NaiveBayesModel(spec, [600, 400], counts, temperature=bad)


def test_a_labelled_sample_recovers_the_temperature_its_labels_were_drawn_at():
    """Labels drawn from softmax(τ·jll) give back τ: on 20,000 records, the grid's 2^-1 of 0.5
    (its neighbours 2^-3/4 and 2^-5/4 lose), and 1 where the labels follow the scores as they are."""
    from aggregator.estimation.calibration import TEMPERATURES, fitted_temperature

    rng = np.random.default_rng(7)
    jll = rng.normal(0, 3, size=(20_000, 3))
    for truth in (0.5, 1.0):
        p = np.exp(truth * jll - (truth * jll).max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        labels = (rng.random((len(p), 1)) > p.cumsum(axis=1)).sum(axis=1)
        fitted, losses = fitted_temperature(jll, labels)
        assert fitted == truth and losses.shape == TEMPERATURES.shape
        assert losses.min() == losses[list(TEMPERATURES).index(truth)]


def test_a_sample_pooled_with_the_reports_weighs_each_share_by_its_variance():
    """A model of one feature and two classes pooled with a sample of 100 rows: reports that say
    nothing (their variances huge) give the sample's Naive Bayes (counts plus one), reports far
    surer than 100 rows keep their own shares, and in between each share is the inverse-variance
    mean of the two (the sample's variance s(1 − s)/N at its total N)."""
    from aggregator.estimation.sample import pool, pooled_with_sample

    spec = CollectionSpec([Feature("f", ["x", "y", "z"])], ["a", "b"], "OUE", 1.0)
    model = NaiveBayesModel(spec, [500, 500], [[[100, 300, 100], [400, 50, 50]]], 0.5, 4.0)
    codes = np.array([[0]] * 50 + [[1]] * 20 + [[2]] * 30)
    labels = np.array([0] * 70 + [1] * 30)
    loose = pooled_with_sample(model, np.full(2, 1e3), [np.full(2, 1e6)], codes, labels)
    np.testing.assert_allclose(loose.class_prior, [71 / 102, 31 / 102], atol=1e-4)
    np.testing.assert_allclose(np.exp(loose.feature_log_prob[0][0]), [51 / 73, 21 / 73, 1 / 73], atol=1e-4)
    np.testing.assert_allclose(np.exp(loose.feature_log_prob[0][1]), [1 / 33, 1 / 33, 31 / 33], atol=1e-4)
    assert (loose.temperature, loose.strength) == (0.5, 4.0)
    tight = pooled_with_sample(model, np.full(2, 1e-6), [np.full(2, 1e-9)], codes, labels)
    np.testing.assert_allclose(tight.class_prior, [0.5, 0.5], atol=1e-3)
    np.testing.assert_allclose(np.exp(tight.feature_log_prob[0]), model.category_count[0] / 500, atol=1e-3)
    reports, counts = np.array([0.2, 0.6, 0.2]), np.array([50.0, 20.0, 0.0])
    sample = (counts + 1) / 73
    w_reports, w_sample = 1 / 0.01, 73 / (sample * (1 - sample))
    expected = (w_reports * reports + w_sample * sample) / (w_reports + w_sample)
    np.testing.assert_allclose(pool(reports, np.full(3, 0.01), counts), expected / expected.sum())




def test_a_feature_of_one_value_pools_to_the_share_one():
    """A feature every record holds the same value of (Mushroom's veil-type) has the share 1 with no
    variance on either side; the pooled model keeps it at 1 and still ranks the classes by the
    other feature, as the sample's Naive Bayes does."""
    from aggregator.estimation.sample import pooled_with_sample

    spec = CollectionSpec([Feature("f", ["x", "y"]), Feature("one", ["v"])], ["a", "b"], "OUE", 1.0)
    model = NaiveBayesModel(spec, [500, 500], [[[400, 100], [100, 400]], [[500], [500]]], 1.0, 1.0)
    codes = np.array([[0, 0]] * 40 + [[1, 0]] * 10 + [[1, 0]] * 40 + [[0, 0]] * 10)
    labels = np.array([0] * 50 + [1] * 50)
    pooled = pooled_with_sample(model, np.full(2, 0.05), [np.full(2, 0.01), np.zeros(2)], codes, labels)
    np.testing.assert_allclose(np.exp(pooled.feature_log_prob[1]), 1.0)
    scores = pooled.joint_log_likelihood_codes(np.array([[0, 0], [1, 0]]))
    assert np.isfinite(scores).all() and list(scores.argmax(axis=1)) == [0, 1]
