"""Populations a collection's reports could come from, and collections drawn from them: the
parametric bootstrap behind the model's temperature (:mod:`aggregator.estimation.calibration`).

Estimate the population from the reports, draw collections of the same size from it through the
same oracles, and rebuild the model from each draw: how the rebuilt models score on records drawn
from the population shows what the reports' noise does to the model. Two populations are offered
(:data:`WORLDS`): one with the class signal the reports estimate (:func:`spread_matched_truth`; the
posterior mean's smaller signal, :func:`plug_in_truth`, makes smoothing look better than it is),
and one without any (:func:`null_truth`). Everything reads only the aggregated statistics
(post-processing): no privacy is spent.

The smoothing strength is not chosen here: a bootstrap choice of it per collection gained nothing
out of sample (``python research/default_choice.py``; documentation, *The default model*).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from protocols import simulate_states

from .count_noise import class_cell_variances
from .model import NaiveBayesModel
from .smoothing import Unsmoothed
from .statistics import CollectionStatistics

# Collections drawn, and records each is scored on.
DRAWS = 12
RECORDS = 2000
# Collections larger than this (cells summed over inputs) are not bootstrapped: the cost grows with
# the cells, and a DE input's exact draw holds a d × d matrix.
MAX_CELLS = 20_000
# A DE input's exact draw holds a d × d matrix: 512² floats are 2 MiB.
MAX_DE_DOMAIN = 512

Derive = Callable[[CollectionStatistics], Unsmoothed]


def statistics_seed(stats: CollectionStatistics) -> int:
    """A seed that is a function of the statistics alone (so the same reports give the same model)."""
    digest = hashlib.sha256()
    for state in stats.states:
        digest.update(np.int64(state.n).tobytes())
        digest.update(np.ascontiguousarray(state.support, dtype=np.float64).tobytes())
    return int.from_bytes(digest.digest()[:8], "little")


def plug_in_truth(stats: CollectionStatistics, base: Unsmoothed, spread_matched: bool = False) -> NaiveBayesModel:
    """The population the bootstrap draws from: ``base``'s class counts, and each class's Norm-Sub
    conditional moved toward ``base.target`` by the weight ``w = σ² / (σ² + s²)``: the
    empirical-Bayes posterior mean of the conditional.

    Toward uniform, ``σ² = v/T²`` is the noise variance of one of the class's shares (``v`` the
    mean plug-in variance of the class's cells, ``T`` the class's expected count on the input: its
    pooled share times the input's reports) and ``s²`` the true spread of its shares around uniform. Toward the
    marginal, the deviation from the pooled marginal ``m = Σ_c π_c·share_c`` carries the noise
    ``σ_c² = (1 − π_c)²·v/T_c² + Σ_{c' ≠ c} π_c'²·v/T_c'²`` and ``s²`` is its true spread. Either
    spread is estimated without bias from the raw (unprojected) count estimates, as their mean
    squared deviation less the noise, and at least 0.

    The posterior mean keeps ``1 − w`` of each deviation, so its squared size is ``(1 − w)²`` of
    the observed one, less than the estimated spread: a world with less class signal than the
    reports estimate, where smoothing looks better than it is. With ``spread_matched`` each
    deviation is kept at ``√(1 − w)`` instead, whose squared size is the estimated spread
    (:func:`spread_matched_truth`)."""
    spec, k = stats.spec, stats.spec.n_classes
    prior = base.class_count / base.class_count.sum()
    tables = []
    for oracle, state, raw, projected in zip(
        spec.oracles[1:], stats.states[1:], stats.estimated_counts()[1:], base.tables
    ):
        d = projected.shape[1]
        expected = np.maximum(prior * max(state.n, 1), 1e-9)  # (k,)
        noise = class_cell_variances(oracle, state.n, raw, k) / expected**2
        raw_shares = raw.reshape(-1, k).T / expected[:, None]  # (k, d)
        shares = projected / np.maximum(projected.sum(axis=1, keepdims=True), 1e-12)
        if base.target == "marginal":
            noise = (1 - prior) ** 2 * noise + (prior**2 * noise).sum() - prior**2 * noise
            deviation = raw_shares - prior @ raw_shares
            aim = projected.sum(axis=0) / max(projected.sum(), 1e-12)
        else:
            deviation = raw_shares - 1.0 / d
            aim = np.full(d, 1.0 / d)
        signal = np.maximum((deviation**2).mean(axis=1) - noise, 0.0)
        weight = (noise / (noise + signal + 1e-300))[:, None]
        if spread_matched:
            weight = 1 - np.sqrt(1 - weight)
        smoothed = np.maximum((1 - weight) * shares + weight * aim, 1e-12)
        tables.append(smoothed / smoothed.sum(axis=1, keepdims=True) * base.class_count[:, None])
    return NaiveBayesModel(spec, base.class_count, tables)


def spread_matched_truth(stats: CollectionStatistics, base: Unsmoothed) -> NaiveBayesModel:
    """:func:`plug_in_truth` with each class's deviation from the target kept at ``√(1 − w)``: a
    population whose class signal has the size the reports estimate, not the posterior mean's
    smaller one."""
    return plug_in_truth(stats, base, spread_matched=True)


def null_truth(stats: CollectionStatistics, base: Unsmoothed) -> NaiveBayesModel:
    """The population without class signal that the reports could also come from: ``base``'s
    class counts, and every class's conditional the feature's pooled marginal (``base``'s tables
    summed over the classes)."""
    tables = []
    for table in base.tables:
        marginal = table.sum(axis=0) + 1e-9
        tables.append(np.outer(base.class_count, marginal / marginal.sum()))
    return NaiveBayesModel(stats.spec, base.class_count, tables)


# The bootstrap's populations, each with its own seed offset so that their draws are independent.
# The spread-matched world stands in for the plug-in one and so shares its offset.
WORLDS = {"plug-in": (plug_in_truth, 0), "spread-matched": (spread_matched_truth, 0), "null": (null_truth, 1)}


def sample_records(model: NaiveBayesModel, m: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``m`` records drawn from ``model`` as if it were the population: integer codes ``(m, n)``
    and each record's posterior class probabilities under the model ``(m, k)``."""
    k = len(model.class_count)
    classes = rng.choice(k, size=m, p=model.class_prior)
    columns = []
    for log_table in model.feature_log_prob:
        cumulative = np.cumsum(np.exp(log_table), axis=1)[classes]  # (m, n_i)
        drawn = (rng.random(m)[:, None] * cumulative[:, -1:] < cumulative).argmax(axis=1)
        columns.append(drawn)
    codes = np.column_stack(columns) if columns else np.zeros((m, 0), dtype=np.int64)
    jll = model.joint_log_likelihood_codes(codes)
    posterior = np.exp(jll - jll.max(axis=1, keepdims=True))
    return codes, posterior / posterior.sum(axis=1, keepdims=True)


def draw_statistics(model: NaiveBayesModel, like: CollectionStatistics, rng) -> CollectionStatistics:
    """A collection as ``like`` (the same spec, the same number of reports on each input, the same
    dummies taken out) whose people are drawn from ``model``: each input's true histogram is
    multinomial, then its reports' state is drawn exactly through the input's oracle."""
    prior = model.class_prior
    joints = [prior] + [(prior[:, None] * np.exp(t)).T.ravel() for t in model.feature_log_prob]  # a·k + c
    drawn = CollectionStatistics(like.spec)
    histograms = [rng.multinomial(int(round(state.n)), joint / joint.sum()) for state, joint in zip(like.states, joints)]
    drawn.states = simulate_states(like.spec.oracles, histograms, rng)
    if like.removed:  # the dummies' noise too, then their expectation out, as the collection's
        from participant.dummies import dummy_states

        count = int(round(like.removed))
        drawn.states = [a + b for a, b in zip(drawn.states, dummy_states(like.spec, count, rng))]
        drawn.dummies = float(count)
        drawn = drawn.people()
    return drawn


def bootstrap_too_large(spec) -> bool:
    """Whether a bootstrap of ``spec``'s collections costs too much to run for each model: more
    than :data:`MAX_CELLS` cells summed over the inputs, or a DE input over :data:`MAX_DE_DOMAIN`
    values (its exact draw holds a d × d matrix)."""
    from protocols import DirectEncoding

    oracles = spec.oracles
    return sum(o.domain_size for o in oracles) > MAX_CELLS or any(
        isinstance(o, DirectEncoding) and o.domain_size > MAX_DE_DOMAIN for o in oracles
    )
