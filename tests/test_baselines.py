import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from participant import encode_features, encode_labels
from sim.baselines import DPSVM, DPDecisionTree, DPGaussianNB, DPNaiveBayes
from sim.baselines.decision_tree import one_hot
from sim.baselines.hellinger import (
    expected_distance,
    exponential_mechanism_probabilities,
    hellinger_beta,
    laplace_probabilities,
    smoothing_gamma,
)
from sim.baselines.neighbours import (
    DPKNearestNeighbours,
    DPRadiusNeighbours,
    degeneracy_bound,
    hamming,
    hamming_ball_sizes,
)
from sim.baselines.noise import CLAMP, noisy_histogram
from sim.baselines.smooth_nb import SmoothSensitivityNB, smooth_bound
from sim.baselines.svm import perturbation, privacy_parameters
from sim.cli import main
from sim.datasets import load_dataset
from sim.experiment import runner_for, split

from .conftest import TABLE_1, table_1_spec

SPEC = table_1_spec()
X1 = encode_features(np.array([r[:3] for r in TABLE_1], dtype=object), SPEC)
Y1 = encode_labels([r[3] for r in TABLE_1], SPEC)


def test_budget_splits_match_the_papers_on_table_1():
    # 3 categorical attributes: ε' = ε / (1 + 3).
    assert DPNaiveBayes(2.0, [3, 3, 2], 2).epsilon_per_query == pytest.approx(0.5)
    # One-hot: |A| = 3 + 3 + 2 = 8 binary attributes, depth ceil(sqrt 8) = 3: ε' = ε / (8·4).
    tree = DPDecisionTree(2.0, [3, 3, 2], 2)
    assert tree.depth == 3 and tree.epsilon_per_query == pytest.approx(2.0 / 32)


def test_histogram_noise_has_the_replacement_sensitivity_scale():
    draws = noisy_histogram(np.zeros(200_000), 0.5, np.random.default_rng(0), positive=False)
    # Laplace(2/ε) with ε = 0.5: scale 4, standard deviation 4·√2.
    assert draws.std() == pytest.approx(4 * np.sqrt(2), rel=0.02)
    clamped = noisy_histogram(np.zeros(1000), 0.5, np.random.default_rng(1))
    assert clamped.min() == CLAMP
    np.testing.assert_array_equal(noisy_histogram(np.array([3, 0]), None, None), [3, CLAMP])


def test_without_noise_the_baselines_are_their_textbook_selves():
    nb = DPNaiveBayes(None, [3, 3, 2], 2).fit(X1, Y1)
    # P(C1) = 4/10 and P(Age = Young | C1) = 2/4, as in the paper's Table 2.
    assert np.exp(nb.class_log_prior_) == pytest.approx([0.4, 0.6])
    assert np.exp(nb.feature_log_prob_[0][0, 0]) == pytest.approx(0.5, rel=1e-4)
    # The noiseless tree is CART: it predicts like scikit-learn's tree of the same depth.
    runner = runner_for(load_dataset("car", download=False))
    train, test, _ = runner.split(0)
    ours = DPDecisionTree(None, runner.n_categories, runner.k).fit(runner.codes[train], runner.labels[train])
    B = one_hot(runner.codes, runner.n_categories)
    reference = DecisionTreeClassifier(max_depth=ours.depth, random_state=0).fit(B[train], runner.labels[train])
    assert ours.score(runner.codes[test], runner.labels[test]) == reference.score(B[test], runner.labels[test])


@pytest.mark.parametrize("epsilon", [0.5, 5.0])
def test_models_are_valid_distributions(epsilon):
    nb = DPNaiveBayes(epsilon, [3, 3, 2], 2, rng=0).fit(X1, Y1)
    np.testing.assert_allclose(np.exp(nb.predict_log_proba(X1)).sum(axis=1), 1.0)
    for table in nb.feature_log_prob_:
        np.testing.assert_allclose(np.exp(table).sum(axis=1), 1.0)
    assert set(DPDecisionTree(epsilon, [3, 3, 2], 2, rng=0).fit(X1, Y1).predict(X1)) <= {0, 1}


def test_at_a_large_epsilon_the_baselines_approach_their_non_private_accuracy():
    runner = runner_for(load_dataset("mushroom", download=False))
    train, test, _ = runner.split(0)
    X, y, args = runner.codes, runner.labels, (runner.n_categories, runner.k)
    for cls in (DPNaiveBayes, DPDecisionTree):
        exact = cls(None, *args).fit(X[train], y[train]).score(X[test], y[test])
        private = cls(1e5, *args, rng=0).fit(X[train], y[train]).score(X[test], y[test])
        assert exact > 0.99 and private > exact - 0.01


def test_compare_prints_a_table_and_writes_a_plot(tmp_path, capsys):
    assert (
        main(["compare", "--dataset", "car", "--eps", "1,4", "--reps", "2", "--knn", "5", "--out", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "LDP Naive Bayes (local, ours) | local" in out and "DP Naive Bayes (central) | central" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "privacy" not in line]
    assert len(rows) == 7  # ours, five baselines (k-NN asked for) and the constant, each with numbers
    for row in rows:
        values = [float(v) for v in row.strip("| ").split(" | ")[2:]]
        assert all(0 < v <= 1 for v in values), row
    # The best constant classifier on each split's test rows: car's, about 0.70.
    constant = [float(v) for v in rows[-1].strip("| ").split(" | ")[2:]]
    assert rows[-1].startswith("| best constant (test rows) | none |") and len(set(constant)) == 1
    assert 0.65 < constant[0] < 0.75
    assert (tmp_path / "compare-car.png").stat().st_size > 10_000


def test_svm_privacy_parameters_match_a_hand_computation():
    # n = 1000, h = 0.05, Λ = 10^-2.5: 1/(nhΛ) = 6.3246, 1/(4n²h²Λ²) = 10, log(17.3246) = 2.8521.
    eps2, ridge = privacy_parameters(5.0, 1000)
    assert eps2 == pytest.approx(5.0 - 2.8521, abs=1e-4) and ridge == pytest.approx(10**-2.5)
    # ε = 1 leaves ε' < 0: ε'' = ε/2 and Λ' = 1/(2nh(e^{1/4} - 1)) = 0.035208.
    eps2, ridge = privacy_parameters(1.0, 1000)
    assert eps2 == 0.5 and ridge == pytest.approx(0.035208, rel=1e-4)


def test_svm_features_lie_in_the_unit_ball_and_noise_has_the_gamma_norm():
    svm = DPSVM(1.0, [3, 3, 2], 2)
    np.testing.assert_allclose(np.linalg.norm(svm.features(X1), axis=1), 1.0)
    norms = [np.linalg.norm(perturbation(np.random.default_rng(s), 0.5, 9)) for s in range(4000)]
    # ‖b‖ ~ Gamma(9, 2/0.5): mean 36, sd 12.
    assert np.mean(norms) == pytest.approx(36, rel=0.03)


def test_svm_at_a_large_epsilon_approaches_its_non_private_accuracy():
    runner = runner_for(load_dataset("mushroom", download=False))
    train, test, _ = runner.split(0)
    X, y, args = runner.codes, runner.labels, (runner.n_categories, runner.k)
    exact = DPSVM(None, *args).fit(X[train], y[train]).score(X[test], y[test])
    assert exact > 0.97
    assert DPSVM(1e4, *args, rng=0).fit(X[train], y[train]).score(X[test], y[test]) > exact - 0.01


def test_hellinger_distance_between_betas_matches_numerical_integration():
    from scipy import integrate, stats

    p, q = stats.beta(3, 5), stats.beta(6, 2.5)
    overlap = integrate.quad(lambda t: np.sqrt(p.pdf(t) * q.pdf(t)), 0, 1)[0]
    assert hellinger_beta(3, 5, 6, 2.5) == pytest.approx(np.sqrt(1 - overlap), rel=1e-6)


def test_smoothing_gamma_matches_a_hand_computation():
    # n = 100, ε = 1, δ = 1e-8: ln(δ / 202) = −23.7290, so γ = ln(1 + 1/47.458) = 0.020852.
    assert smoothing_gamma(1.0, 1e-8, 100) == pytest.approx(0.020852, rel=1e-4)


@pytest.mark.parametrize("n", [50, 200])
def test_posterior_mechanisms_meet_their_guarantees_exactly(n):
    epsilon, delta = 1.0, 1e-8
    for a in range(0, n, max(1, n // 10)):
        for mechanism in (
            lambda c: exponential_mechanism_probabilities(c, n, epsilon, delta),
            lambda c: laplace_probabilities(c, n, epsilon, 1.0),
        ):
            P, Q = mechanism(a), mechanism(a + 1)
            assert P.sum() == pytest.approx(1.0) and Q.sum() == pytest.approx(1.0)
            # (ε, δ): the probability mass beyond the e^ε ratio is at most δ, both ways.
            assert np.maximum(P - np.exp(epsilon) * Q, 0).sum() <= delta
            assert np.maximum(Q - np.exp(epsilon) * P, 0).sum() <= delta


def test_the_exponential_mechanism_overtakes_dimension_scaled_laplace_on_large_data():
    # Measured (research/hellinger.py): 0.3481 vs 0.1355 at n = 100, 0.0560 vs 0.0568 at n = 600.
    small = (exponential_mechanism_probabilities(50, 100, 1.0, 1e-8), laplace_probabilities(50, 100, 1.0, 2.0))
    large = (exponential_mechanism_probabilities(300, 600, 1.0, 1e-8), laplace_probabilities(300, 600, 1.0, 2.0))
    assert expected_distance(small[0], 50, 100) > expected_distance(small[1], 50, 100)
    assert expected_distance(large[0], 300, 600) < expected_distance(large[1], 300, 600)


def test_gaussian_baseline_without_noise_is_gaussian_naive_bayes():
    from sklearn.naive_bayes import GaussianNB

    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 10, 500), rng.uniform(-5, 5, 500)])
    y = (X[:, 0] + rng.normal(0, 2, 500) > 5).astype(int)
    ours = DPGaussianNB(None, [(0, 10), (-5, 5)], 2).fit(X, y)
    reference = GaussianNB().fit(X - [5, 0], y)  # our values are centred on the range's middle
    np.testing.assert_allclose(ours.theta_, reference.theta_)
    np.testing.assert_allclose(ours.var_, reference.var_, rtol=1e-6)
    assert ours.score(X, y) == reference.score(X - [5, 0], y)
    # Budget: class counts plus a sum and a sum of squares per attribute.
    assert DPGaussianNB(5.0, [(0, 1)] * 2, 2).epsilon_per_query == pytest.approx(1.0)


def test_gaussian_baseline_noise_follows_the_declared_range():
    # One attribute on [0, 10]: h = 5, ε' = 3/3 = 1, so the per-class sum gets Laplace(2h/ε') = Laplace(10).
    X, y = np.full((4000, 1), 5.0), np.zeros(4000, dtype=int)  # centred values are all 0
    sums = [DPGaussianNB(3.0, [(0, 10)], 2, rng=s).fit(X, y).theta_[0, 0] * 4000 for s in range(400)]
    # θ = sum / ñ is clipped to ±h; with ñ ≈ 4000 the sd of θ·ñ is about √2·10.
    assert np.std(sums) == pytest.approx(np.sqrt(2) * 10, rel=0.15)


def test_compare_covers_numerical_data_sets(tmp_path, capsys):
    assert main(["compare", "--dataset", "diabetes", "--eps", "2", "--reps", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "DP Gaussian Naive Bayes (central)" in out and "DP SVM (central)" in out


def brute_force_clique_number(adjacency: np.ndarray) -> int:
    import itertools

    n = len(adjacency)
    for size in range(n, 0, -1):
        for subset in itertools.combinations(range(n), size):
            if all(adjacency[a, b] for a, b in itertools.combinations(subset, 2)):
                return size
    return 0


def test_degeneracy_bounds_the_clique_number():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(2, 10))
        upper = np.triu(rng.random((n, n)) < rng.uniform(0.2, 0.9), 1)
        adjacency = upper | upper.T
        assert degeneracy_bound(adjacency) >= brute_force_clique_number(adjacency)


def test_no_record_lies_in_more_test_balls_than_the_bound():
    import itertools

    n_categories = [3, 3, 3]
    space = np.array(list(itertools.product(range(3), repeat=3)))  # every possible record
    rng = np.random.default_rng(1)
    tests = space[rng.choice(len(space), 8, replace=False)]
    model = DPRadiusNeighbours(1.0, n_categories, 2, radius=1, rng=0).fit(space[:5], np.array([0, 1, 0, 1, 0]))
    model.predict(tests)
    depth = (hamming(space, tests, n_categories) <= 1).sum(axis=1).max()
    assert depth <= max(model.clique_bounds_.values())


def test_isolated_queries_get_the_base_noise_and_large_epsilon_recovers_the_classifier():
    X = np.array([[0, 0, 0], [2, 2, 2]])  # Hamming distance 3 > 2r: two components of one node
    model = DPRadiusNeighbours(1.0, [3, 3, 3], 2, radius=1, rng=0).fit(X, np.array([0, 1]))
    model.predict(X)
    assert model.clique_bounds_ == {0: 1, 1: 1}  # Laplace(2·1/ε) per count
    runner = runner_for(load_dataset("car", download=False))
    train, test, _ = runner.split(0)
    args = (runner.n_categories, runner.k)
    exact = DPRadiusNeighbours(None, *args, radius=1).fit(runner.codes[train], runner.labels[train])
    private = DPRadiusNeighbours(1e6, *args, radius=1, rng=0).fit(runner.codes[train], runner.labels[train])
    # Where the exact counts have a unique largest label, tiny noise cannot change the answer.
    within = hamming(runner.codes[test], runner.codes[train], runner.n_categories) <= 1
    counts = within.astype(int) @ np.eye(runner.k, dtype=int)[runner.labels[train]]
    top = np.sort(counts, axis=1)
    unique = top[:, -1] > top[:, -2]
    assert unique.mean() > 0.8
    np.testing.assert_array_equal(
        exact.predict(runner.codes[test])[unique], private.predict(runner.codes[test])[unique]
    )


def test_hamming_balls_and_the_uniform_radius():
    # [3, 3, 2]: 1 record at distance 0, 5 at 1 (2 + 2 + 1), 8 at 2, 4 at 3; 18 in all.
    np.testing.assert_array_equal(hamming_ball_sizes([3, 3, 2]), [1, 6, 14, 18])
    model = DPKNearestNeighbours(1.0, [3, 3, 2], 2, k=5).fit(np.zeros((36, 3), dtype=int), np.zeros(36, dtype=int))
    # 36 records spread over 18 cells: 2 per cell; a ball of radius 1 (6 cells) holds 12 >= 5.
    assert model.uniform_radius() == 1


def test_knn_conversion_finds_the_kth_neighbour_distance_and_spends_its_share():
    runner = runner_for(load_dataset("car", download=False))
    train, test, _ = runner.split(0)
    X, y, args = runner.codes, runner.labels, (runner.n_categories, runner.k)
    exact = DPKNearestNeighbours(None, *args, k=10).fit(X[train], y[train]).radii(X[test])
    distances = np.sort(hamming(X[test], X[train], runner.n_categories), axis=1)
    np.testing.assert_array_equal(exact, distances[:, 9])
    # With a huge budget the exponential mechanism picks the candidate whose count is closest to k.
    private = DPKNearestNeighbours(1e9, *args, k=10, rng=0).fit(X[train], y[train])
    radii = private.radii(X[test])
    counts = (hamming(X[test], X[train], runner.n_categories) <= radii[:, None]).sum(axis=1)
    candidates = np.arange(min(2 * max(private.uniform_radius(), 1), len(runner.n_categories)) + 1)
    best = np.abs((distances[:, :, None] <= candidates).sum(axis=1) - 10).min(axis=1)
    np.testing.assert_array_equal(np.abs(counts - 10), best)
    assert 0.8 < DPKNearestNeighbours(None, *args, k=10).fit(X[train], y[train]).score(X[test], y[test])


def test_smooth_bound_matches_a_hand_computation_and_is_beta_smooth():
    # n = 10, width 1, β = 0.1, mean (power 1): max over k of e^{-0.1k}/max(10 − k, 1) is at k = 9: e^{-0.9}.
    assert smooth_bound(10, 1.0, 0.1, 1.0) == pytest.approx(np.exp(-0.9))
    for power in (1.0, 0.5):
        for n in range(1, 60):
            s = smooth_bound(n, 2.0, 0.05, power)
            for m in (n - 1, n + 1):
                if m >= 0:
                    assert s <= np.exp(0.05) * smooth_bound(m, 2.0, 0.05, power) + 1e-12
            assert s >= 2.0 / max(n, 1) ** power  # never below the local sensitivity bound


def test_class_statistics_move_within_the_stated_local_sensitivity():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        m = int(rng.integers(1, 12))
        x = rng.uniform(0, 1, m)
        changed = [np.append(x[1:], rng.uniform()), np.append(x, rng.uniform())]  # replace one, add one
        if m > 1:
            changed.append(x[1:])  # remove one
        for other in changed:
            smaller = min(m, len(other))
            assert abs(other.mean() - x.mean()) <= 1.0 / smaller + 1e-12
            assert abs(other.std() - x.std()) <= 1.0 / np.sqrt(smaller) + 1e-12


def test_smooth_sensitivity_nb_is_gaussian_nb_without_noise_and_spends_its_budget():
    data = load_dataset("diabetes", download=False)
    X_train, X_test, y_train, y_test = split(data, 0)
    labels = {c: i for i, c in enumerate(data.classes)}
    ytr, yte = np.array([labels[v] for v in y_train]), np.array([labels[v] for v in y_test])
    exact = SmoothSensitivityNB(None, data.ranges, 2).fit(X_train, ytr)
    assert exact.score(X_test, yte) == DPGaussianNB(None, data.ranges, 2).fit(X_train, ytr).score(X_test, yte)
    assert SmoothSensitivityNB(17.0, data.ranges, 2).epsilon_per_query == pytest.approx(1.0)  # 17 = 2·8 + 1
    large = SmoothSensitivityNB(1e7, data.ranges, 2, rng=0).fit(X_train, ytr)
    np.testing.assert_allclose(large.theta_, exact.theta_, rtol=1e-3)


def test_dirichlet_hellinger_and_mechanism():
    from sim.baselines.hellinger import compositions, dirichlet_mechanism_probabilities, hellinger_dirichlet

    assert hellinger_dirichlet(np.array([3.0, 5.0]), np.array([6.0, 2.5])) == pytest.approx(
        hellinger_beta(3, 5, 6, 2.5)
    )
    cands = compositions(30, 3)
    assert len(cands) == 31 * 32 // 2 and (cands.sum(axis=1) == 30).all() and (cands >= 0).all()
    assert len({tuple(c) for c in cands}) == len(cands)
    epsilon, delta = 1.0, 1e-8
    for counts, neighbour in (([10, 10, 10], [11, 9, 10]), ([0, 5, 25], [1, 5, 24]), ([30, 0, 0], [29, 1, 0])):
        _, P = dirichlet_mechanism_probabilities(counts, epsilon, delta)
        _, Q = dirichlet_mechanism_probabilities(neighbour, epsilon, delta)
        assert P.sum() == pytest.approx(1.0)
        assert np.maximum(P - np.exp(epsilon) * Q, 0).sum() <= delta
        assert np.maximum(Q - np.exp(epsilon) * P, 0).sum() <= delta
