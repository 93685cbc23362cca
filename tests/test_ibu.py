"""Iterative Bayesian Update: the maximum-likelihood histogram behind DE reports."""

import numpy as np

from aggregator.estimation.estimators import iterative_bayesian_update
from protocols import make_oracle


def test_ibu_recovers_the_histogram_and_stays_a_histogram():
    truth = np.array([5000, 3000, 1500, 500, 0, 0])
    oracle = make_oracle("DE", 1.0, len(truth))
    rng = np.random.default_rng(3)
    estimates = np.array([iterative_bayesian_update(oracle, oracle.simulate_counts(truth, rng)).counts for _ in range(50)])
    assert (estimates >= 0).all() and np.allclose(estimates.sum(axis=1), truth.sum())
    # Unbiased estimates have this standard deviation; the MLE (biased near the boundary) stays within it.
    sd = np.sqrt(oracle.variance(truth.sum(), truth))
    assert (np.abs(estimates.mean(axis=0) - truth)[:4] < 0.4 * sd[:4]).all()
    # Where the truth is 0 the MLE errs less than an unbiased estimate, whose mean absolute error
    # is about 0.8 sd (and which goes negative).
    assert (np.abs(estimates[:, 4:]).mean(axis=0) < 0.8 * sd[4:]).all()
    # With almost no noise it returns the counts.
    exact = make_oracle("DE", 30.0, len(truth))
    np.testing.assert_allclose(iterative_bayesian_update(exact, exact.simulate_counts(truth, rng)).counts, truth, atol=1)
