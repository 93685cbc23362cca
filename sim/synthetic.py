"""Collections drawn from a known Naive Bayes model: what estimators are judged against."""

from __future__ import annotations

import numpy as np

from aggregator import CollectionStatistics
from participant import CollectionSpec
from participant.reporting import input_probabilities


def known_model_statistics(spec: CollectionSpec, prior, conditionals, n: int, rng) -> CollectionStatistics:
    """Fast-mode statistics of ``n`` people whose class follows ``prior`` (shape ``(k,)``) and
    whose feature ``i`` follows ``conditionals[i]`` (shape ``(k, n_i)``, rows summing to 1) given
    the class; each person reports one input, chosen as the spec says (uniformly by default)."""
    k = spec.n_classes
    stats = CollectionStatistics(spec)
    reporters = rng.multinomial(n, input_probabilities(spec))
    for i, (oracle, m) in enumerate(zip(spec.oracles, reporters)):
        y = rng.choice(k, m, p=prior)
        values = y
        if i:
            table = np.asarray(conditionals[i - 1])
            a = np.empty(m, dtype=np.int64)
            for c in range(k):
                rows = np.flatnonzero(y == c)
                a[rows] = rng.choice(table.shape[1], len(rows), p=table[c])
            values = a * k + y
        stats.states[i] = oracle.simulate_counts(np.bincount(values, minlength=oracle.domain_size), rng)
    return stats


def largest_conditional_error(model, conditionals) -> float:
    """The largest absolute error of ``model``'s conditional probabilities against the known
    ``conditionals`` (one ``(k, n_i)`` table per feature)."""
    return max(np.abs(np.exp(log_prob) - np.asarray(t)).max() for log_prob, t in zip(model.feature_log_prob, conditionals))
