"""What the reports can tell a model: the class prior's covariance against the spread of its
estimate over exact draws, the exact dependence test's calibration and power, and the summary."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from aggregator import CollectionStatistics
from aggregator.estimation.bootstrap import draw_statistics
from aggregator.estimation.class_prior import pooled_class_shares, pooled_covariance
from aggregator.estimation.dependence import combined_p_value, deviation_statistic, exact_feature_p_values
from aggregator.estimation.evidence import evidence, summary
from aggregator.estimation.model import NaiveBayesModel
from participant import CollectionSpec, Feature


def population(protocol: str, epsilon: float, prior, conditionals, n: int):
    """A known model (class ``prior``, per feature ``(k, d)`` ``conditionals``) and statistics
    shaped like a collection of ``n`` reports per input, for :func:`draw_statistics`."""
    k = len(prior)
    features = [Feature(f"f{i}", [f"v{j}" for j in range(t.shape[1])]) for i, t in enumerate(conditionals)]
    spec = CollectionSpec(features, [f"c{j}" for j in range(k)], protocol, epsilon)
    truth = NaiveBayesModel(spec, np.asarray(prior) * 1e6, [np.asarray(t) * 1e6 for t in conditionals])
    like = CollectionStatistics(spec)
    for state in like.states:
        state.n = n
    return truth, like


CAR_PRIOR = (0.70, 0.22, 0.04, 0.04)


@pytest.mark.parametrize(
    "protocol, epsilon, prior",
    [("auto", 0.5, CAR_PRIOR), ("DE", 1.0, CAR_PRIOR), ("DE", 2.0, (0.5, 0.3, 0.2)), ("SHE", 1.0, (0.6, 0.4))],
)
def test_the_pooled_class_shares_spread_as_their_covariance_says(protocol, epsilon, prior):
    """4,000 exact collections: each class's variance within 8 % of the formula (a sample
    variance's standard error is 2.2 % here) and each correlation within 0.06 of it. DE's classes
    covary negatively (a report lands in one set of cells), which a diagonal formula misses."""
    rng = np.random.default_rng(7)
    k = len(prior)
    conditionals = [rng.dirichlet(np.full(d, 2.0), size=k) for d in (3, 4, 2)]
    truth, like = population(protocol, epsilon, prior, conditionals, 300)
    draws = [draw_statistics(truth, like, rng) for _ in range(4000)]
    shares = np.array([pooled_class_shares(d).shares for d in draws])
    predicted = pooled_covariance(draws[0], pooled_class_shares(draws[0]), np.asarray(prior))
    observed = np.cov(shares.T)
    np.testing.assert_allclose(np.diag(observed) / np.diag(predicted), 1.0, atol=0.08)
    scale = np.sqrt(np.outer(np.diag(predicted), np.diag(predicted)))
    np.testing.assert_allclose(observed / scale, predicted / scale, atol=0.06)
    np.testing.assert_allclose(shares.mean(axis=0), prior, atol=4 * np.sqrt(np.diag(predicted) / 4000).max())


@pytest.mark.parametrize("protocol, prior", [("OUE", (0.7, 0.3)), ("DE", (0.5, 0.5)), ("DE", CAR_PRIOR)])
def test_the_exact_dependence_test_holds_its_level_and_finds_a_dependence(protocol, prior):
    """Features independent of the class, 2,000 reports per input at ε = 1, 400 collections: the
    combined p-value falls below 0.05 in 2–9 % of them (the approximate test of the bootstrap: 22 %
    for DE with two balanced classes). With one feature that depends on the class and 8,000
    reports per input, below 0.01 in most (at 2,000, DE over car's sixteen cells finds it in 11 %)."""
    rng = np.random.default_rng(11)
    k = len(prior)
    flat = [np.tile(rng.dirichlet(np.full(d, 2.0)), (k, 1)) for d in (2, 3, 4)]
    truth, like = population(protocol, 1.0, prior, flat, 2000)
    level = np.mean([combined_p_value(exact_p(draw_statistics(truth, like, rng))) < 0.05 for _ in range(400)])
    assert 0.02 <= level <= 0.09
    dependent = [*flat[:2], np.eye(k, 4)[:, :4] * 0.6 + 0.1]
    dependent[2] = dependent[2] / dependent[2].sum(axis=1, keepdims=True)
    truth, like = population(protocol, 1.0, prior, dependent, 8000)
    power = np.mean([combined_p_value(exact_p(draw_statistics(truth, like, rng))) < 0.01 for _ in range(100)])
    assert power > 0.7


@pytest.mark.parametrize("protocol", ["DE", "OUE", "SHE"])
def test_the_block_statistic_equals_the_full_covariance_one(protocol):
    """The statistic solved block by block (with DE's rank-one term) equals ``D'Σ⁻¹D`` written
    out with the full matrices: the deviations ``A·raw`` and their covariance ``A·Cov·Aᵀ``."""
    from protocols import DirectEncoding, make_oracle

    rng = np.random.default_rng(4)
    for k, d in ((2, 3), (4, 4), (3, 10)):
        oracle = make_oracle(protocol, 1.0, k * d)
        n = 2000
        true = rng.multinomial(n, rng.dirichlet(np.ones(k * d)))
        raw = oracle.estimate(oracle.simulate_counts(true, rng))
        prior = rng.dirichlet(np.full(k, 3.0))
        counts = np.clip(raw, 0, None)
        counts = counts * n / counts.sum()
        if isinstance(oracle, DirectEncoding):
            p, q = oracle.p, oracle.q
            reported = q + (p - q) * counts / n
            covariance = n * (np.diag(reported) - np.outer(reported, reported)) / (p - q) ** 2
        else:
            covariance = np.diag(oracle.variance(n, counts))
        kept = np.delete(np.arange(k), prior.argmax())
        A = np.kron(np.eye(d), (np.eye(k) - prior[None, :])[kept] / (prior * n)[None, :])
        D = A @ raw
        expected = D @ np.linalg.solve(A @ covariance @ A.T, D)
        assert deviation_statistic(oracle, n, raw, prior) == (pytest.approx(expected, rel=1e-9), (k - 1) * d)


def exact_p(stats):
    pooled = pooled_class_shares(stats)
    return exact_feature_p_values(stats, np.clip(pooled.shares, 1e-3, None) * stats.n_reports)


def test_evidence_on_car_at_two_privacy_levels():
    """Car's class prior (0.70 / 0.22 / 0.04 / 0.04) from 1,382 people at ε = 0.5 and 4 in fast
    mode (seed 55: at ε = 0.5 the reports put 'acc' ahead, by less than a standard error)."""
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Runner

    runner = Runner(load_dataset("car", download=False))
    low = evidence(runner.statistics(("auto", 0.5, DEFAULT_THETA, "one-report"), 55, "fast"))
    assert low["majority_class"] == "acc" and 0 < low["majority_lead"] < 1
    assert all(0.12 < se < 0.2 for se in low["class_prior_standard_error"].values())
    assert "not a safe margin" in low["summary"] and "is significant (p = " in low["summary"]
    high = evidence(runner.statistics(("auto", 4.0, DEFAULT_THETA, "one-report"), 55, "fast"))
    assert high["majority_class"] == "unacc" and high["majority_lead"] > 10
    assert high["feature_p_values"]["safety"] < 1e-6 and high["dependence_p_value"] < 1e-6
    assert all(se < 0.02 for se in high["class_prior_standard_error"].values())
    assert "The features depend on the class" in high["summary"] and "not a safe margin" not in high["summary"]
    assert sum(high["class_prior"].values()) == pytest.approx(1.0)


def test_summary_sentences():
    assert summary("a", "b", 2.5, 0.001, True) == (
        "The reports make 'a' the most common class, 2.5 standard errors ahead of 'b'. "
        "The features depend on the class (p = 0.001)."
    )
    assert summary("a", "b", 1.2, 0.4, True) == (
        "The reports make 'a' the most common class, 1.2 standard errors ahead of 'b': not a safe margin, "
        "another class may be the most common; more reports, or more of them on the class input, would settle "
        "it. No dependence of the features on the class is significant (p = 0.40); many weak ones can still "
        "help the model."
    )
    assert summary("a", "b", 3.0, 1.0, False).endswith("No feature could be tested for a dependence on the class.")


def test_no_reports_no_evidence():
    truth, _ = population("DE", 1.0, (0.5, 0.5), [np.full((2, 2), 0.5)], 0)
    assert evidence(CollectionStatistics(truth.spec)) == {}


def gaussian_collection(share_a: float, epsilon: float, m: int, rng):
    """A Gaussian collection (approach 3, two coordinates on [0, 1], DE class input) of ``m``
    people whose class is ``a`` with probability ``share_a``; the coordinates lie around 0.6 for
    class ``a`` and 0.4 for ``b`` (prepared: ±0.2); returns its statistics. The people are the
    same for the same arguments; only the reports are drawn from ``rng``."""
    from sim.experiment import simulate_collection

    spec, inputs = gaussian_people(share_a, epsilon, m)
    return simulate_collection(spec, inputs, rng, "fast")


@functools.cache
def gaussian_people(share_a: float, epsilon: float, m: int):
    """The spec and the inputs of :func:`gaussian_collection`'s people (drawn from seed 1), built
    once: encoding them costs more than drawing their reports. ``simulate_collection`` only reads
    the inputs."""
    from participant.continuous import ContinuousFeature, Preparation
    from participant.encoding import population_inputs

    prep = Preparation([ContinuousFeature("h", 0.0, 1.0), ContinuousFeature("w", 0.0, 1.0)])
    spec = CollectionSpec([], ["a", "b"], "DE", epsilon, continuous=prep, model="gaussian", approach=3)
    people = np.random.default_rng(1)
    y = np.where(people.random(m) < share_a, "a", "b")
    X = np.clip(people.normal(0.5, 0.2, (m, 2)) + np.where(y == "a", 0.1, -0.1)[:, None], 0, 1)
    inputs = population_inputs(spec, X, y)
    for x in inputs:
        x.flags.writeable = False
    return spec, inputs


def test_a_gaussian_collections_evidence_is_its_class_inputs():
    """The class input alone carries a Gaussian collection's class counts: the prior is the
    model's, its standard errors DE's for that input as estimates of the people's shares
    (``ρ(1 − ρ)/((p − q)² n) − (n/m)·π(1 − π)/n``, ``ρ = q + (p − q)π``: the ``n`` reporters are
    drawn without replacement from the ``m`` people; ``π`` the prior moved toward even shares by
    four pseudo-reports; derived here), and over 2,000 collections of the same people the
    majority share spreads as they say (within 5 %). A 0.7 : 0.3 prior leads safely; 0.52 : 0.48 does not. Both coordinates' class means
    differ by 0.4 in prepared units: at ε = 1 each is about one standard error of the difference
    (no verdict), at ε = 4 the tests find it."""
    from aggregator.estimation.gaussian import class_prior

    rng = np.random.default_rng(2)
    stats = gaussian_collection(0.7, 1.0, 6000, rng)
    found = evidence(stats)
    oracle, n = stats.spec.oracles[0], stats.states[0].n
    prior = class_prior(stats, "normsub")
    assert list(found["class_prior"].values()) == pytest.approx(prior.tolist(), abs=1e-12)
    counted = (n * prior + 2) / (n + 4)
    rho = oracle.q + (oracle.p - oracle.q) * counted
    expected = np.sqrt(rho * (1 - rho) / ((oracle.p - oracle.q) ** 2 * n) - counted * (1 - counted) / 6000)
    assert list(found["class_prior_standard_error"].values()) == pytest.approx(expected.tolist(), rel=1e-9)
    assert found["majority_class"] == "a" and found["majority_lead"] > 5
    assert set(found["feature_p_values"]) == {"h", "w"} and "not a safe margin" not in found["summary"]
    sharp = evidence(gaussian_collection(0.7, 4.0, 6000, rng))
    assert max(sharp["feature_p_values"].values()) < 1e-4 and sharp["dependence_p_value"] < 1e-6
    assert "The features depend on the class" in sharp["summary"]

    shares = [evidence(gaussian_collection(0.7, 1.0, 6000, rng))["class_prior"]["a"] for _ in range(2000)]
    assert np.std(shares, ddof=1) / expected[0] == pytest.approx(1.0, abs=0.05)

    close = evidence(gaussian_collection(0.52, 1.0, 6000, rng))
    assert close["majority_lead"] < 2 and "not a safe margin" in close["summary"]


@pytest.mark.parametrize("epsilon", [1.0, 8.0])
def test_a_gaussian_collections_class_mean_errors_are_their_spread(epsilon):
    """Over 2,000 exact collections (approach 3, 6,000 people; prepared means of ±0.2, so the
    prior's own noise, which the errors leave out, barely moves them) each class's estimated mean
    of the first coordinate spreads as the reported standard error says, within 6 %; the rarer
    class's error is the larger. At ε = 8 the Laplace noise no longer hides the spread of the
    class-hiding entries: errors without it are 15–25 % short."""
    from aggregator.estimation.gaussian import class_moments, class_prior

    rng = np.random.default_rng(9)
    means, errors = [], []
    for _ in range(2000):
        stats = gaussian_collection(0.7, epsilon, 6000, rng)
        theta, _ = class_moments(stats, class_prior(stats, "normsub"))
        means.append(theta[:, 0])
        found = evidence(stats)["class_mean_standard_error"]
        errors.append([found["a"][0], found["b"][0]])
    spread, reported = np.std(means, axis=0, ddof=1), np.mean(errors, axis=0)
    assert spread / reported == pytest.approx([1.0, 1.0], abs=0.06)
    assert reported[1] > 1.3 * reported[0]


@pytest.mark.parametrize(
    ("approach", "k", "epsilon", "m"),
    [(1, 2, 4.0, 2000), (2, 2, 4.0, 2000), (3, 2, 4.0, 2000), (3, 3, 4.0, 2000), (1, 3, 1.0, 2000), (3, 2, 0.5, 300)],
)
def test_a_gaussian_coordinates_test_holds_its_level(approach, k, epsilon, m):
    """Where no coordinate depends on the class, each coordinate's p-value of equal class means
    falls below 0.05 and 0.2 as often as it says, within three standard errors, over 1,000 exact
    collections. The values are skewed and lie far from 0 (prepared mean about -0.5), so that
    the class prior's noise, by which every mean is divided, counts: left out, approach 3 at
    ε = 4 rejects in 9 % of collections. At ε = 0.5 and 300 people the means are tested
    unclipped: clipped to the range, their deviations are too small and the test too timid."""
    from aggregator.estimation.dependence import gaussian_feature_p_values
    from participant.continuous import ContinuousFeature, Preparation
    from participant.encoding import population_inputs
    from sim.experiment import simulate_collection

    classes = ["a", "b", "c"][:k]
    prep = Preparation([ContinuousFeature("h", -1.0, 1.0), ContinuousFeature("w", -1.0, 1.0)])
    spec = CollectionSpec([], classes, "DE", epsilon, continuous=prep, model="gaussian", approach=approach)
    people = np.random.default_rng(5)
    y = people.choice(classes, size=m, p=[0.6] + [0.4 / (k - 1)] * (k - 1))
    X = np.clip(people.exponential(0.3, (m, 2)) - 0.8, -1, 1)
    inputs = population_inputs(spec, X, y)
    rng = np.random.default_rng(6)
    p = np.array([gaussian_feature_p_values(simulate_collection(spec, inputs, rng, "fast")) for _ in range(1000)])
    for level in (0.05, 0.2):
        rate = (p < level).mean(axis=0)
        assert np.all(np.abs(rate - level) < 3 * np.sqrt(level * (1 - level) / len(p))), (level, rate)


def test_a_gaussian_coordinate_without_reports_is_not_tested():
    """A coordinate whose inputs have no reports gets no p-value; with none tested, the summary
    says so and the combined p-value is 1."""
    stats = gaussian_collection(0.7, 4.0, 6000, np.random.default_rng(3))
    empty = CollectionStatistics(stats.spec)
    stats.states[3], stats.states[4] = empty.states[3], empty.states[4]  # approach 3: w's inputs
    found = evidence(stats)
    assert found["feature_p_values"]["w"] is None and found["feature_p_values"]["h"] < 1e-4
    stats.states[1], stats.states[2] = empty.states[1], empty.states[2]
    found = evidence(stats)
    assert found["feature_p_values"] == {"h": None, "w": None} and found["dependence_p_value"] == 1.0
    assert "No feature could be tested" in found["summary"]
