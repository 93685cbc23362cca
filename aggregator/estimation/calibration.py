"""How far to soften the model's class probabilities, chosen per collection from its own reports.

Naive Bayes adds one log-likelihood per feature. Under local DP each of them carries noise, and
forty-two noisy terms (connect-4) add up to posteriors near 0 or 1 where the reports hold almost
nothing: at ε = 0.5 the smoothed model's log-loss was 4.3 nats per record against the class
prior's 0.85, though it predicts the majority class as often as the prior does. A temperature
``τ ≤ 1`` scales every joint log-likelihood before normalising, ``P(c | x) ∝ exp(τ·jll_c)``, the
"temperature scaling" of Guo et al. (2017, "On calibration of modern neural networks"); it keeps
every prediction (the order of the classes' scores is the same), so accuracy does not change.

``τ`` is chosen by a parametric bootstrap (:mod:`aggregator.estimation.bootstrap`): collections of the same
size are drawn through the same oracles from populations the reports could come from, the model
is rebuilt from each, and each ``τ`` of :data:`TEMPERATURES` is scored by its expected log-loss
on records drawn from the population, against the population's own class probabilities. The
populations are the spread-matched one (class signal of the size the reports estimate) and the
null one (no feature tells the classes apart), mixed by the probability of the null given the
reports (:mod:`aggregator.estimation.dependence`). The plug-in world, whose class signal is the posterior
mean's smaller one, lost 0.044 ± 0.011 nats on mushroom at ε = 0.5 (seeds 0–99), where the
spread-matched one is within its error of τ = 1 (``python research/calibration.py``).

Only softening is considered: the draws are Naive Bayes populations, whose features are
independent given the class, so they cannot see the overconfidence that dependent features add on
real data; offered ``τ`` up to 4 as well, the choice gained on no row of the estimators table and
lost more on car at ε = 1 (0.019 ± 0.004 nats against 0.014 ± 0.004; ``python
research/calibration.py``, seeds 0–99). A softer ``τ`` must also beat ``τ = 1`` by :data:`MARGIN` nats of
expected log-loss, so that where the model is already about right (car at ε ≥ 2) it is left
alone. It costs car at ε = 1 0.014 ± 0.004 nats, where the model is mostly its class prior and a
temperature softens the prior with the features. Reads only the aggregated statistics
(post-processing): no privacy is spent.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .bootstrap import (
    DRAWS,
    RECORDS,
    WORLDS,
    Derive,
    bootstrap_too_large,
    draw_statistics,
    sample_records,
    statistics_seed,
)
from .dependence import dependence_p_value, null_probability
from .model import one_hot
from .smoothing import Unsmoothed
from .statistics import CollectionStatistics

# 1 down to 1/64 in quarter powers of two: connect-4 at ε = 0.5 is best near 0.09 on its test rows.
TEMPERATURES = 2.0 ** -np.arange(0, 6.01, 0.25)
# Expected log-loss (nats per record) a softer temperature must save to be chosen. Picked from 0,
# 0.002, 0.005, 0.01 and 0.02 on seeds 0–9; on seeds 0–99 (python research/calibration.py) 0 and 0.002
# cost car at ε = 2 and 4 up to 0.004 nats, 0.01 and 0.02 gave up 0.007–0.030 of chess's gain at 1 and 2.
MARGIN = 0.005


def choose_temperature(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed,
    strength: float,
    temperatures: np.ndarray = TEMPERATURES,
    draws: int = DRAWS,
    records: int = RECORDS,
) -> float:
    """The temperature of ``temperatures`` (decreasing from 1) with the lowest expected log-loss of
    ``derive(drawn)`` smoothed at ``strength``, mixed over the spread-matched and the null world
    by the null's probability, if it beats the first by :data:`MARGIN`; else the first: what
    :func:`pick` takes from every temperature's score. Returns 1.0 without reports or where the
    bootstrap would be too large (:func:`~aggregator.estimation.bootstrap.bootstrap_too_large`).

    The mixed expected log-loss is convex in ``τ`` (per record ``log Σ_c exp(τ·jll_c)`` is convex
    and ``τ·Σ_c p_c·jll_c`` linear), so along the decreasing temperatures it falls to its least
    and then rises: a bisection on its slope finds the least in about ``2·log2(T)`` of the ``T``
    scores, the same choice at well under half the cost."""
    if stats.n_reports == 0 or bootstrap_too_large(stats.spec):
        return 1.0
    worlds = [
        bootstrap_joint_log_likelihoods(stats, derive, base, strength, world, draws, records)
        for world in ("spread-matched", "null")
    ]
    weight = null_probability(dependence_p_value(stats, base.class_count))
    scores: dict[int, float] = {}

    def score(i: int) -> float:
        if i not in scores:
            matched, null = (expected_log_loss(jll, posterior, temperatures[i : i + 1])[0] for jll, posterior in worlds)
            scores[i] = weight * null + (1 - weight) * matched
        return scores[i]

    best = convex_argmin(score, len(temperatures))
    return float(temperatures[best]) if score(best) <= score(0) - MARGIN else float(temperatures[0])


def fitted_temperature(
    jll: np.ndarray, labels: np.ndarray, temperatures: np.ndarray = TEMPERATURES
) -> tuple[float, np.ndarray]:
    """The temperature of ``temperatures`` with the least log-loss on labelled records whose joint
    log-likelihoods under the model are ``jll`` ``(m, k)`` and whose classes are ``labels``
    (indices, shape ``(m,)``), and every temperature's log-loss (nats per record, ``(T,)``).

    For an operator who holds a labelled public sample (the one a spec is drafted from): unlike
    the bootstrap's Naive-Bayes worlds, real records show the overconfidence that dependent
    features add (connect-4's board cells). The sample is not a report: nothing private is read."""
    losses = expected_log_loss(jll, np.eye(jll.shape[1])[labels], temperatures)
    return float(temperatures[int(np.argmin(losses))]), losses


def convex_argmin(score: Callable[[int], float], n: int) -> int:
    """The index in ``0 … n − 1`` where ``score`` (convex along the indices: falling, then rising)
    is least, the first of equal ones, by bisection on its slope: about ``2·log2(n)`` calls."""
    low, high = 0, n - 1
    while low < high:
        middle = (low + high) // 2
        if score(middle + 1) < score(middle):
            low = middle + 1
        else:
            high = middle
    return low


def pick(score: np.ndarray, temperatures: np.ndarray = TEMPERATURES, margin: float = MARGIN) -> float:
    """Of ``temperatures`` (the first is 1), the one of lowest expected log-loss ``score`` (nats,
    shape ``(T,)``) among those that beat the first by at least ``margin``; else the first."""
    better = score <= score[0] - margin
    return (
        float(temperatures[int(np.argmin(np.where(better, score, np.inf)))]) if better.any() else float(temperatures[0])
    )


def bootstrap_joint_log_likelihoods(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed,
    strength: float,
    world: str,
    draws: int = DRAWS,
    records: int = RECORDS,
) -> tuple[np.ndarray, np.ndarray]:
    """The joint log-likelihoods of ``records`` records drawn from the ``world`` of
    :data:`~aggregator.estimation.bootstrap.WORLDS` built from ``base``, under ``derive(drawn)`` smoothed at
    ``strength`` for each of ``draws`` drawn collections, stacked ``(draws·records, k)``, and the
    world's class probabilities of those records, repeated alike ``(draws·records, k)``. Seeded by
    the statistics (the same reports give the same temperature)."""
    population, offset = WORLDS[world]
    rng = np.random.default_rng(statistics_seed(stats) + offset)
    truth = population(stats, base)
    codes, posterior = sample_records(truth, records, rng)
    onehot = one_hot(codes, [t.shape[1] for t in truth.feature_log_prob])
    jll = []
    for _ in range(draws):
        drawn = derive(draw_statistics(truth, stats, rng))
        log_prob = np.concatenate(drawn.log_probabilities(np.array([strength])), axis=2)[0]  # (k, Σ n_i)
        jll.append(onehot @ log_prob.T + np.log(drawn.class_count / drawn.class_count.sum()))
    return np.concatenate(jll), np.tile(posterior, (draws, 1))


def bootstrap_log_losses(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed,
    strength: float,
    world: str,
    temperatures: np.ndarray = TEMPERATURES,
    draws: int = DRAWS,
    records: int = RECORDS,
) -> np.ndarray:
    """Per temperature, shape ``(len(temperatures),)``: the expected log-loss (nats per record) of
    the draws of :func:`bootstrap_joint_log_likelihoods` tempered, against the world's class
    probabilities, averaged over the draws and records: every score :func:`choose_temperature`
    may read."""
    jll, posterior = bootstrap_joint_log_likelihoods(stats, derive, base, strength, world, draws, records)
    return expected_log_loss(jll, posterior, temperatures)


def expected_log_loss(jll: np.ndarray, posterior: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
    """Per temperature ``τ`` (shape ``(T,)``), the mean over records of ``−Σ_c p_c log q_c``, nats:
    ``q = softmax(τ·jll)`` of the joint log-likelihoods ``jll`` ``(m, k)`` and ``p`` the records'
    true class probabilities ``posterior`` ``(m, k)``."""
    # Classes on the middle axis: reductions over a few classes then run over contiguous records.
    scaled = np.asarray(temperatures, dtype=float)[:, None, None] * np.ascontiguousarray(jll.T)[None]  # (T, k, m)
    top = scaled.max(axis=1)
    normaliser = top + np.log(np.exp(scaled - top[:, None]).sum(axis=1))  # (T, m)
    # −Σ_c p_c log q_c = normaliser − Σ_c p_c·scaled_c, as the p_c sum to 1.
    return (normaliser - (scaled * np.ascontiguousarray(posterior.T)[None]).sum(axis=1)).mean(axis=1)
