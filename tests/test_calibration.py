"""The temperature of the model's class probabilities (aggregator.calibration): it softens a model
whose many noisy features make it sure of nothing it knows, leaves a well-measured one alone,
never changes a prediction, and travels with the model to scikit-learn and back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

from aggregator import build_model
from aggregator.calibration import (
    MARGIN,
    TEMPERATURES,
    bootstrap_log_losses,
    choose_temperature,
    convex_argmin,
    expected_log_loss,
    pick,
    strength_from_sample,
)
from aggregator.dependence import dependence_p_value, null_probability
from aggregator.estimators import normsub_unsmoothed
from aggregator.model import NaiveBayesModel
from aggregator.strength import choose_strength, sample_records
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
        strength = choose_strength(stats, normsub_unsmoothed, base)
        weight = null_probability(dependence_p_value(stats, base.class_count))
        scores = [
            bootstrap_log_losses(stats, normsub_unsmoothed, base, strength, w) for w in ("null", "spread-matched")
        ]
        every = pick(weight * scores[0] + (1 - weight) * scores[1])
        assert choose_temperature(stats, normsub_unsmoothed, base, strength) == every


def test_forty_noisy_features_without_signal_are_softened_toward_knowing_nothing():
    """40 three-valued features independent of two even classes, 4,000 people at ε = 0.5 (DE):
    at temperature 1 the model's summed noise costs 1.34 nats a record where knowing nothing costs
    log 2 = 0.69; the chosen temperature (below 0.4 on every seed) brings it within 0.1 of that."""
    spec, conditionals, truth = population(40, 3, [0.5, 0.5], None, "DE", 0.5)
    for seed in range(4):
        stats = known_model_statistics(spec, [0.5, 0.5], conditionals, 4000, np.random.default_rng(seed))
        model = build_model(stats)
        sharp = build_model(stats, temperature=1.0)
        assert model.temperature < 0.4
        assert true_log_loss(sharp, truth) > 1.0
        assert true_log_loss(model, truth) < np.log(2) + 0.1


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
    did at temperature 1, but its log-loss on the test rows falls from above 3.5 nats to below 1.2
    (the class prior alone: 0.85)."""
    runner = runner_for(load_dataset("connect-4", download=False))
    setting = ("auto", 0.5, DEFAULT_THETA, "one-report")
    for seed in range(3):
        stats = runner.statistics(setting, seed, "fast")
        tempered, sharp = build_model(stats), build_model(stats, temperature=1.0)
        accuracy, loss = runner._score([tempered, sharp], seed)
        assert tempered.temperature < 0.5
        assert accuracy[0] == accuracy[1]
        assert loss[1] > 3.5 and loss[0] < 1.2


def test_an_estimator_that_takes_the_statistics_alone_still_builds_at_a_given_temperature(monkeypatch):
    """A simulation that scores accuracy alone asks for temperature 1; an estimator registered
    beside the shipped ones (a bench's variant) that takes no temperature is built as it is."""
    from aggregator import estimators

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
    from aggregator.calibration import TEMPERATURES, fitted_temperature

    rng = np.random.default_rng(7)
    jll = rng.normal(0, 3, size=(20_000, 3))
    for truth in (0.5, 1.0):
        p = np.exp(truth * jll - (truth * jll).max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        labels = (rng.random((len(p), 1)) > p.cumsum(axis=1)).sum(axis=1)
        fitted, losses = fitted_temperature(jll, labels)
        assert fitted == truth and losses.shape == TEMPERATURES.shape
        assert losses.min() == losses[list(TEMPERATURES).index(truth)]


def test_the_class_prior_pooled_with_a_sample_weighs_each_by_its_variance():
    from aggregator.calibration import pooled_with_sample

    labels = np.array([0] * 70 + [1] * 22 + [2] * 8)  # a sample of 100: shares (71, 23, 9) / 103
    sample = np.array([71, 23, 9]) / 103
    reports = np.array([0.3, 0.6, 0.1])
    loose, shares = pooled_with_sample(reports, np.full(3, 10.0), labels)  # reports that say nothing
    assert np.allclose(shares, sample) and np.allclose(loose, sample, atol=1e-3)
    tight, _ = pooled_with_sample(reports, np.full(3, 1e-5), labels)  # reports far surer than 100 rows
    assert np.allclose(tight, reports, atol=1e-3)
    errors = np.array([0.05, 0.1, 0.02])
    pooled, _ = pooled_with_sample(reports, errors, labels)
    w_reports, w_sample = 1 / errors**2, 103 / (sample * (1 - sample))
    expected = (w_reports * reports + w_sample * sample) / (w_reports + w_sample)
    assert np.allclose(pooled, expected / expected.sum())


def test_a_model_with_another_class_prior_keeps_its_conditionals():
    spec = CollectionSpec(
        features=[Feature("a", ["x", "y", "z"]), Feature("b", ["x", "y", "z"]), Feature("c", ["u", "v"])],
        classes=["Yes", "No"],
        protocol="OUE",
        epsilon=1.0,
    )
    model = NaiveBayesModel(spec, [30, 10], [[[5, 10, 15], [2, 3, 5]], [[1, 1, 1], [3, 3, 3]], [[6, 4], [2, 8]]], 0.5)
    moved = model.with_class_prior([0.2, 0.8])
    assert np.allclose(moved.class_prior, [0.2, 0.8]) and moved.temperature == 0.5
    assert moved.class_count.sum() == pytest.approx(40)
    for before, after in zip(model.feature_log_prob, moved.feature_log_prob):
        assert np.allclose(before, after)


def test_a_strength_replaces_the_served_one_only_where_it_leads_the_sample_by_a_standard_error():
    """McNemar's paired comparison on a labelled sample of 100 rows, the served model right on the
    first 60: a candidate replaces it only if the rows it alone gets right (gained) exceed those
    only the served model gets right (lost) by more than √(gained + lost); of several, the one
    that leads most."""
    labels = np.zeros(100, dtype=int)

    def scores(right) -> np.ndarray:
        """Joint log-likelihoods (100, 2) that predict class 0 (right) on the rows ``right``."""
        jll = np.tile([0.0, 1.0], (100, 1))
        jll[np.asarray(right), 0] = 2.0
        return jll

    served = scores(range(60))

    def candidate(gained: int, lost: int) -> np.ndarray:
        return scores([*range(lost, 60), *range(60, 60 + gained)])

    leads = {  # gained, lost: lead and its standard error
        "a": (10, 4),  # 6 > √14 = 3.7
        "b": (20, 12),  # 8 > √32 = 5.7: leads most
        "c": (3, 1),  # 2, not above √4 = 2
        "d": (30, 25),  # 5 < √55 = 7.4
    }
    models = {name: candidate(*counts) for name, counts in leads.items()}
    chosen, gained, lost = strength_from_sample(served, list(models.values()), labels)
    assert list(models)[chosen] == "b"
    assert list(zip(gained, lost)) == list(leads.values())
    chosen, _, _ = strength_from_sample(served, [models["a"], models["c"], models["d"]], labels)
    assert chosen == 0
    assert strength_from_sample(served, [models["c"], models["d"]], labels)[0] is None
    assert strength_from_sample(served, [served], labels)[0] is None  # the served strength itself never leads
