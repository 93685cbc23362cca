import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from aggregator import CollectionStatistics, NaiveBayesModel, build_model, project_to_simplex
from participant import choose_inputs, encode_features, encode_labels, input_values, perturb_population

from .conftest import TABLE_1, table_1_spec

X1 = np.array([row[:3] for row in TABLE_1], dtype=object)
Y1 = np.array([row[3] for row in TABLE_1], dtype=object)
YOUNG_FEMALE_MEDIUM = np.array([["Young", "Medium", "Female"]], dtype=object)


def exact_counts(spec, X, y):
    """Non-private class counts (k,) and per-feature (k, n_i) counts."""
    codes, labels = encode_features(X, spec), encode_labels(y, spec)
    k = spec.n_classes
    class_count = np.bincount(labels, minlength=k)
    category = [
        np.bincount(codes[:, i] * k + labels, minlength=len(f.categories) * k).reshape(-1, k).T
        for i, f in enumerate(spec.features)
    ]
    return class_count, category


def collect(spec, X, y, seed):
    rng = np.random.default_rng(seed)
    inputs = input_values(encode_features(X, spec), encode_labels(y, spec), spec.n_classes)
    stats = CollectionStatistics(spec)
    stats.add_population(perturb_population(spec, inputs, choose_inputs(spec, len(y), rng), rng))
    return stats


def test_table_1_without_privacy(spec):
    model = NaiveBayesModel(spec, *exact_counts(spec, X1, Y1))
    assert model.class_prior == pytest.approx([4 / 10, 6 / 10])
    age = np.exp(model.feature_log_prob[0])
    assert age[0] == pytest.approx([2 / 4, 1 / 4, 1 / 4])  # Table 2, C1
    assert age[1] == pytest.approx([1 / 6, 2 / 6, 3 / 6])  # Table 2, C2
    scores = np.exp(model.joint_log_likelihood_codes(encode_features(YOUNG_FEMALE_MEDIUM, spec)))[0]
    # C1: 4/10 · 2/4 · 1/4 · 2/4 = 0.025, as the paper says. C2: 6/10 · 1/6 · 1/6 · 2/6 = 1/180:
    # the paper prints 0.055, an arithmetic slip, and so predicts C2; the table's data say C1.
    assert scores == pytest.approx([0.025, 1 / 180])
    assert model.predict(YOUNG_FEMALE_MEDIUM)[0] == "Yes"


@pytest.mark.parametrize("estimator", ["paper", "normsub"])
def test_estimators_recover_table_1_at_a_large_epsilon(estimator):
    spec = table_1_spec(protocol="DE", epsilon=30.0)
    reps = 4000
    stats = collect(spec, np.tile(X1, (reps, 1)), np.tile(Y1, reps), seed=7)
    model = build_model(stats, estimator)
    # Each of the 4 inputs gets ~10,000 of the 40,000 reports: proportions to within ~0.5%.
    assert model.class_prior == pytest.approx([0.4, 0.6], abs=0.02)
    # Table 2 of the paper, every feature and both classes (rows: C1 = Yes, C2 = No). Checking one
    # row passed for a class-major reshape of the joint index a·k + c; the second rows do not.
    table_2 = [
        [[2 / 4, 1 / 4, 1 / 4], [1 / 6, 2 / 6, 3 / 6]],  # age: Young, Medium, Old
        [[2 / 4, 1 / 4, 1 / 4], [2 / 6, 1 / 6, 3 / 6]],  # income: Low, Medium, High
        [[2 / 4, 2 / 4], [4 / 6, 2 / 6]],  # gender: Male, Female
    ]
    for learned, expected in zip(model.feature_log_prob, table_2):
        np.testing.assert_allclose(np.exp(learned), expected, atol=0.03)
    assert model.predict(YOUNG_FEMALE_MEDIUM)[0] == "Yes"


def test_paper_estimator_sets_non_positive_estimates_to_one(spec):
    stats = CollectionStatistics(spec)
    oracle = spec.oracles[0]
    # 100 class reports all saying "Yes": E_No = (0 - 100 q)/(p - q) < 0.
    stats.add(0, np.zeros(100, dtype=np.int64))
    model = build_model(stats, "paper")
    e_yes = (100 - 100 * oracle.q) / (oracle.p - oracle.q)
    assert model.class_count == pytest.approx([e_yes, 1.0])
    # Features with no reports at all: every estimate 0, set to 1, so uniform conditionals.
    assert np.exp(model.feature_log_prob[0]) == pytest.approx(np.full((2, 3), 1 / 3))


def test_normsub_pools_class_priors_from_every_input(spec):
    stats = CollectionStatistics(spec)
    # Nobody reported the class input; the age input's joint reports still carry class counts.
    oracle = spec.oracles[1]
    joint = np.repeat([0, 1, 3], [12_000, 20_000, 8_000])  # (Young,Yes), (Young,No), (Medium,No)
    stats.add(1, oracle.perturb(joint, np.random.default_rng(3)))
    model = build_model(stats, "normsub")
    # The Yes count sums 3 cells' estimates; 4 standard deviations of that sum, as a proportion.
    sd = np.sqrt(3 * oracle.variance(40_000)[0]) / 40_000
    assert model.class_prior == pytest.approx([0.3, 0.7], abs=4 * sd)
    assert 4 * sd < 0.06


def test_unknown_estimator_is_refused(spec):
    with pytest.raises(ValueError, match="normsub"):
        build_model(CollectionStatistics(spec), "magic")


def test_statistics_merge_equals_one_pass(spec):
    X, y = np.tile(X1, (50, 1)), np.tile(Y1, 50)
    a, b = collect(spec, X[:200], y[:200], 1), collect(spec, X[200:], y[200:], 2)
    whole = CollectionStatistics(spec)
    for part in (a, b):
        for i, state in enumerate(part.states):
            whole.states[i] = whole.states[i] + state
    a.merge(b)
    assert a.n_reports == whole.n_reports == 500
    for s, t in zip(a.states, whole.states):
        np.testing.assert_array_equal(s.support, t.support)


@given(
    arrays(np.float64, st.integers(2, 12), elements=st.floats(-1e4, 1e4)),
    st.floats(1, 1e5),
)
def test_simplex_projection_is_the_closest_feasible_point(estimate, total):
    x = project_to_simplex(estimate, total)
    assert (x >= 0).all()
    assert x.sum() == pytest.approx(total, rel=1e-9)
    # Optimality (KKT): one shift δ with x = max(estimate - δ, 0).
    positive = x > 0
    delta = (estimate - x)[positive]
    assert delta == pytest.approx(np.full(delta.shape, delta[0]), abs=1e-6 * (1 + abs(total)))
    assert (estimate[~positive] <= delta[0] + 1e-6 * (1 + abs(total))).all()


@given(
    arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 12)), elements=st.floats(-1e4, 1e4)),
    st.lists(st.sampled_from([0.0, 1.0, 37.5, 1e5]), min_size=6, max_size=6),
)
def test_rows_projected_together_equal_each_projected_alone(estimates, totals):
    """``normsub`` projects every feature input of one size in one call: each row, with its own
    total (0 included), is the projection of that row alone."""
    totals = totals[: len(estimates)]
    together = project_to_simplex(estimates, totals)
    for row, total, projected in zip(estimates, totals, together):
        np.testing.assert_array_equal(projected, project_to_simplex(row, total))
        assert projected.sum() == pytest.approx(total, rel=1e-9, abs=1e-9)


def test_projection_leaves_feasible_points_alone():
    x = np.array([3.0, 0.0, 7.0])
    np.testing.assert_allclose(project_to_simplex(x, 10.0), x)
    np.testing.assert_array_equal(project_to_simplex(x, 0), 0)


@pytest.mark.parametrize("estimator", ["paper", "normsub"])
def test_model_probabilities_and_sklearn_exports_agree(estimator):
    spec = table_1_spec(protocol="OUE", epsilon=2.0)
    stats = collect(spec, np.tile(X1, (300, 1)), np.tile(Y1, 300), seed=4)
    model = build_model(stats, estimator)
    proba = model.predict_proba(X1)
    assert proba.shape == (10, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    nb = model.to_sklearn()
    codes = encode_features(X1, spec)
    np.testing.assert_allclose(nb.predict_proba(codes), proba)
    np.testing.assert_array_equal(nb.predict(codes), model.predict(X1))
    pipeline = model.to_sklearn_pipeline()
    np.testing.assert_array_equal(pipeline.predict(X1), model.predict(X1))
    assert pipeline.score(X1, Y1) == pytest.approx(model.score(X1, Y1))
    # The records users hold: dicts with the label or without it, a DataFrame with or without it.
    import pandas as pd

    names = [f.name for f in spec.features]
    with_label = [{**dict(zip(names, row)), spec.label: y} for row, y in zip(X1, Y1)]
    without = [dict(zip(names, row)) for row in X1]
    for X in (with_label, without, pd.DataFrame(with_label), pd.DataFrame(without)):
        np.testing.assert_array_equal(pipeline.predict(X), model.predict(X1))
        np.testing.assert_array_equal(model.predict(X), model.predict(X1))  # the model takes them too
        np.testing.assert_allclose(model.predict_proba(X), proba)


@pytest.mark.parametrize("exported", [False, True])
def test_an_unknown_value_names_its_feature(spec, exported):
    model = NaiveBayesModel(spec, *exact_counts(spec, X1, Y1))
    predict = model.to_sklearn_pipeline().predict if exported else model.predict
    with pytest.raises(ValueError, match="income") as refused:
        predict([{"age": "Young", "income": "Huge", "gender": "Male"}])
    assert "Huge" in str(refused.value) and "column 0" not in str(refused.value)


def test_model_refuses_unknown_categories(spec):
    model = NaiveBayesModel(spec, *exact_counts(spec, X1, Y1))
    with pytest.raises(ValueError, match="income"):
        model.predict(np.array([["Young", "Huge", "Male"]], dtype=object))
