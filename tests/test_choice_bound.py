"""The premise of research/choice_bound.py: its two populations hold the same per-input marginals
(so a collection's reports are distributed alike on both) while one fixed model classifies them
differently, and its exact accuracy is the share of the population's rows it gets right."""

import numpy as np
import pytest

from research.choice_bound import (
    CATEGORIES,
    ESTIMATORS,
    K,
    base_population,
    exact_accuracy,
    fitted,
    input_marginals,
    searched_pair,
    shared_collection,
    shared_runs,
    spec_of,
)


@pytest.fixture(scope="module")
def pair():
    """J+ and J− searched on 40 pilot runs of 1,000 people at ε 2, and one collection's models."""
    spec = spec_of(CATEGORIES, K, 2.0)
    marginals = input_marginals(base_population())
    predicted, _ = shared_runs(spec, marginals, 1000, range(40))
    plus, minus = searched_pair(predicted, marginals, CATEGORIES, K)
    models, _ = fitted(shared_collection(spec, marginals, 1000, np.random.default_rng(7)))
    return marginals, plus, minus, models


def test_the_two_populations_hold_the_same_marginals_and_differ_in_dependence(pair):
    marginals, plus, minus, _ = pair
    for joint in (plus, minus):
        assert joint.min() >= 0 and joint.sum() == pytest.approx(1.0, abs=1e-12)
        for got, want in zip(input_marginals(joint), marginals):  # the class's too, which no constraint names
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert np.abs(plus - minus).sum() > 0.5  # different populations, not one twice


def test_one_model_classifies_the_two_populations_differently(pair):
    _, plus, minus, models = pair
    gaps = [exact_accuracy(model, plus) - exact_accuracy(model, minus) for model in models]
    assert max(abs(g) for g in gaps) > 0.01, dict(zip(ESTIMATORS, gaps))


def test_exact_accuracy_is_the_share_of_rows_predicted_right(pair):
    _, plus, _, models = pair
    model = models[ESTIMATORS.index("paper")]
    rng = np.random.default_rng(3)
    m = 200_000
    cell = rng.choice(plus.size, size=m, p=plus.ravel() / plus.sum())
    codes = np.column_stack(np.unravel_index(cell // K, CATEGORIES))
    right = np.argmax(model.joint_log_likelihood_codes(codes), axis=1) == cell % K
    share, se = right.mean(), right.std() / np.sqrt(m)
    assert abs(exact_accuracy(model, plus) - share) < 4 * se + 1e-9


def test_the_plug_in_score_is_the_accuracy_on_the_population_it_draws_from(pair):
    """research/estimator_choice.py's plug-in score (tried, not offered): its per-draw values
    average to the exact accuracy on the conditionally independent population they are drawn from."""
    from research.choice_bound import conditionally_independent
    from research.estimator_choice import plug_in_accuracies

    _, _, _, models = pair
    rng = np.random.default_rng(5)
    prior = np.array([0.3, 0.7])
    conditionals = [rng.dirichlet(np.ones(n), size=K) for n in CATEGORIES]
    joint = conditionally_independent(prior, conditionals, CATEGORIES)
    rights = plug_in_accuracies(models, (prior, conditionals), np.random.default_rng(6), draws=20_000)
    for model, right in zip(models, rights):
        assert abs(right.mean() - exact_accuracy(model, joint)) < 4 * right.std() / np.sqrt(len(right)) + 1e-9
