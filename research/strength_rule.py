"""The bootstrap's choice of a smoothing strength, kept here as a candidate that
``research/default_choice.py`` compares with the default (strength 1), which it did not beat out of
sample; the aggregator no longer runs it.

The rule: strength 1 unless another strength's expected accuracy, over :data:`DRAWS` collections
drawn from the spread-matched world (:mod:`aggregator.estimation.bootstrap`) and scored on
:data:`RECORDS` records drawn from it, leads strength 1's by more than :data:`LEAD` standard errors
of their paired difference; then the one that leads most.
"""

from __future__ import annotations

import numpy as np

from aggregator.estimation.bootstrap import (
    DRAWS,
    RECORDS,
    WORLDS,
    Derive,
    bootstrap_too_large,
    draw_statistics,
    sample_records,
    statistics_seed,
)
from aggregator.estimation.model import one_hot
from aggregator.estimation.smoothing import REFERENCE, STRENGTHS, Unsmoothed
from aggregator.estimation.statistics import CollectionStatistics

# Standard errors by which another strength must lead strength 1, and the world the draws come from.
LEAD = 1.5
WORLD = "spread-matched"


def choose_strength(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
    lead: float = LEAD,
) -> float:
    """The strength of ``strengths`` for ``derive(stats)`` (or ``base``): :data:`REFERENCE`,
    unless another's expected accuracy over ``draws`` collections drawn from the :data:`WORLD`
    (scored on ``records`` records from it, :func:`bootstrap_accuracies`)
    leads the reference's by more than ``lead`` standard errors of their paired difference over
    the draws; then the one that leads most. Returns the reference when there are no reports or
    when the collection is larger than :data:`MAX_CELLS` cells or holds a DE input over
    :data:`MAX_DE_DOMAIN` values."""
    if REFERENCE not in strengths:
        raise ValueError(f"the strengths must include the reference {REFERENCE}")
    if stats.n_reports == 0 or len(strengths) == 1 or bootstrap_too_large(stats.spec):
        return REFERENCE
    accuracy = bootstrap_accuracies(stats, derive, base, strengths, draws, records, WORLD)  # (draws, S)
    gain = accuracy - accuracy[:, [strengths.index(REFERENCE)]]
    mean = gain.mean(axis=0)
    error = gain.std(axis=0, ddof=1) / np.sqrt(draws)
    leading = np.where(mean > lead * error, mean, -np.inf)
    leading[strengths.index(REFERENCE)] = 0.0
    return float(strengths[int(np.argmax(leading))])


def bootstrap_accuracies(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
    world: str = "plug-in",
) -> np.ndarray:
    """The expected accuracy of each strength in each drawn collection, shape ``(draws,
    len(strengths))``: the posterior probability, under the truth, of the class the smoothed
    ``derive(drawn)`` predicts, averaged over ``records`` records drawn from the truth
    (:func:`bootstrap_predictions`)."""
    predicted, posterior = bootstrap_predictions(stats, derive, base, strengths, draws, records, world)
    return posterior[np.arange(len(posterior))[:, None], predicted].mean(axis=1)


def bootstrap_predictions(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
    world: str = "plug-in",
) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's raw material: the class each strength's smoothing of ``derive(drawn)``
    predicts for each record in each drawn collection, shape ``(draws, records, len(strengths))``,
    and the records' class probabilities under the truth (the ``world`` of :data:`WORLDS`:
    :func:`plug_in_truth` or :func:`null_truth` of ``base`` or ``derive(stats)``), shape
    ``(records, k)``. Every strength is scored on the same draws and records, all at once. The
    draws are seeded by the statistics, so the result is a function of the reports."""
    population, offset = WORLDS[world]
    rng = np.random.default_rng(statistics_seed(stats) + offset)
    truth = population(stats, base or derive(stats))
    codes, posterior = sample_records(truth, records, rng)
    # The records one-hot over every feature's values, so that a model's joint log-likelihoods
    # of all records are one sparse product.
    onehot = one_hot(codes, [t.shape[1] for t in truth.feature_log_prob])
    predicted = [predictions(derive(draw_statistics(truth, stats, rng)), onehot, strengths) for _ in range(draws)]
    return np.array(predicted), posterior


def predictions(drawn: Unsmoothed, onehot, strengths) -> np.ndarray:
    """The class ``drawn`` smoothed at each of ``strengths`` predicts for each record, shape
    ``(m, S)``; ``onehot`` holds the records one-hot ``(m, Σ n_i)``."""
    records, n = onehot.shape[0], len(strengths)
    log_prob = np.concatenate(drawn.log_probabilities(np.array(strengths)), axis=2)  # (S, k, Σ n_i)
    k = log_prob.shape[1]
    jll = (onehot @ log_prob.reshape(n * k, -1).T).reshape(records, n, k)  # (m, S, k)
    jll += np.log(drawn.class_count / drawn.class_count.sum())
    return jll.argmax(axis=2)
