"""The test for class dependence behind the bootstrap's null world: its p-values are near uniform
where no feature depends on the class (OUE; DE's are too small, as its docstring and
research/null_world.py say) and small where one does, and the calibration to a probability of
"no dependence" is Sellke, Bayarri and Berger's."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator import CollectionStatistics
from aggregator.estimation.bootstrap import draw_statistics
from aggregator.estimation.dependence import dependence_p_value, null_probability
from aggregator.estimation.estimators import normsub_unsmoothed
from aggregator.estimation.model import NaiveBayesModel
from participant import CollectionSpec, Feature


def population(prior, conditionals, protocol: str, epsilon: float) -> tuple[CollectionSpec, NaiveBayesModel]:
    features = [Feature(f"f{i}", [f"v{j}" for j in range(t.shape[1])]) for i, t in enumerate(conditionals)]
    spec = CollectionSpec(features, [f"c{j}" for j in range(len(prior))], protocol, epsilon)
    return spec, NaiveBayesModel(spec, np.asarray(prior) * 1e6, [t * 1e6 for t in conditionals])


def p_values(spec: CollectionSpec, truth: NaiveBayesModel, people: int, collections: int, seed: int) -> np.ndarray:
    """The p-value of ``collections`` collections drawn from ``truth``, ``people`` reports per input."""
    rng = np.random.default_rng(seed)
    like = CollectionStatistics(spec)
    for state in like.states:
        state.n = people
    found = []
    for _ in range(collections):
        drawn = draw_statistics(truth, like, rng)
        found.append(dependence_p_value(drawn, normsub_unsmoothed(drawn).class_count))
    return np.array(found)


@pytest.mark.parametrize("prior", [[0.7, 0.3], [0.70, 0.22, 0.04, 0.04]])
def test_without_dependence_the_p_values_of_oue_inputs_are_near_uniform(prior):
    """Four features independent of the class (skewed marginals of 2 to 5 values), OUE (car's
    protocol at ε ≤ 1) with 2,000 reports per input at ε = 1, 600 collections: the share of
    p-values below 0.05 lies within 0.02–0.10 (measured 0.08 and 0.06: the cells' variance is taken
    at an empty cell's, a little below a held value's) and below 0.2 within 0.12–0.30. Without the
    (k − 1)/k factor two classes reject a quarter; with each class's own noise for a deviation's
    the p-values crowd toward 1 and none falls below 0.05."""
    rng = np.random.default_rng(11)
    k = len(prior)
    conditionals = [np.tile(rng.dirichlet(np.full(d, 2.0)), (k, 1)) for d in (2, 3, 4, 5)]
    spec, truth = population(prior, conditionals, "OUE", 1.0)
    p = p_values(spec, truth, 2000, 600, seed=3)
    assert 0.02 <= (p < 0.05).mean() <= 0.10
    assert 0.12 <= (p < 0.2).mean() <= 0.30


@pytest.mark.parametrize("protocol", ["OUE", "DE"])
def test_a_feature_that_depends_on_the_class_gives_small_p_values(protocol):
    """One of four features depends on the class (shares 0.6/0.3/0.1 against 0.2/0.3/0.5), 2,000
    reports per input at ε = 1, 60 collections: the p-value is below 0.01 in most of them."""
    rng = np.random.default_rng(12)
    conditionals = [np.tile(rng.dirichlet(np.full(d, 2.0)), (2, 1)) for d in (2, 4, 5)]
    conditionals.append(np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]]))
    spec, truth = population([0.6, 0.4], conditionals, protocol, 1.0)
    p = p_values(spec, truth, 2000, 60, seed=4)
    assert (p < 0.01).mean() > 0.7


def test_the_null_probability_is_sellke_bayarri_and_bergers_bound():
    """At even prior odds: 0.289 at p = 0.05, 0.111 at 0.01, 0.018 at 0.001, one half from 1/e on,
    rising with p in between."""
    assert null_probability(0.05) == pytest.approx(0.2893, abs=1e-4)
    assert null_probability(0.01) == pytest.approx(0.1113, abs=1e-4)
    assert null_probability(0.001) == pytest.approx(0.01843, abs=1e-4)
    assert null_probability(0.45) == null_probability(0.5) == null_probability(1 / np.e) == 0.5
    grid = np.linspace(1e-6, 1 / np.e, 200)
    assert np.all(np.diff([null_probability(p) for p in grid]) > 0)
    assert null_probability(0.0) == 0.0
