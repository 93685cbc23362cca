"""An operator's labelled public sample, pooled with the reports.

An operator often holds a few hundred labelled records that are public or separately consented
(the sample a spec is drafted from). Its counts estimate the same class prior and conditionals the
reports do, with the multinomial noise of a small sample instead of the mechanisms' noise, so the
two estimates are pooled, each share weighted by the inverse of its variance: where the reports
are noisy (small ε, few people) the model is mostly the sample's Naive Bayes, where they are
precise it is mostly theirs. Nothing private is read: the sample is not a report.
"""

from __future__ import annotations

import numpy as np

from .count_noise import class_cell_variances
from .model import NaiveBayesModel


def sample_counts(codes: np.ndarray, labels: np.ndarray, shapes: list[int], k: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sample's class counts (shape ``(k,)``) and per feature its counts by class and value
    (shape ``(k, n_i)``), from category codes ``(m, n)`` and class indices ``(m,)``."""
    labels = np.asarray(labels)
    tables = []
    for i, d in enumerate(shapes):
        tables.append(np.bincount(labels * d + codes[:, i], minlength=k * d).reshape(k, d).astype(float))
    return np.bincount(labels, minlength=k).astype(float), tables


def report_share_variances(spec, estimates: list[np.ndarray], reports: list[int], prior: np.ndarray) -> list[np.ndarray]:
    """Per feature, the noise variance of each class's share of one value as the reports estimate
    it (shape ``(k,)``): the plug-in variance of the class's cells over its squared expected count,
    from each feature input's unbiased joint ``estimates`` and its number of ``reports``."""
    k = spec.n_classes
    out = []
    for oracle, raw, n in zip(spec.oracles[1:], estimates[1:], reports[1:]):
        expected = np.maximum(prior * max(n, 1), 1e-9)
        out.append(class_cell_variances(oracle, n, raw, k) / expected**2)
    return out


def pooled_with_sample(
    model: NaiveBayesModel,
    prior_errors: np.ndarray,
    share_variances: list[np.ndarray],
    codes: np.ndarray,
    labels: np.ndarray,
) -> NaiveBayesModel:
    """``model`` (the reports' own) with its class prior and every conditional pooled with a
    labelled sample's (category ``codes`` ``(m, n)``, class indices ``labels`` ``(m,)``), at the
    same temperature. Each class share is weighted by the inverse of its variance: the reports'
    ``prior_errors`` squared (shape ``(k,)``) and ``share_variances`` (per feature ``(k,)``,
    :func:`report_share_variances`); the sample's counts plus one over their total, of variance
    ``s(1 − s)/N`` for ``N`` the total."""
    k = len(model.class_count)
    shapes = [t.shape[1] for t in model.feature_log_prob]
    class_counts, tables = sample_counts(codes, labels, shapes, k)
    prior = pool(model.class_prior, np.asarray(prior_errors, dtype=float) ** 2, class_counts)
    conditionals = []
    for log_table, variance, counted in zip(model.feature_log_prob, share_variances, tables):
        rows = [pool(np.exp(row), np.full(row.shape, v), counts) for row, v, counts in zip(log_table, variance, counted)]
        conditionals.append(np.array(rows) * prior[:, None] * len(labels))
    return NaiveBayesModel(model.spec, prior * len(labels), conditionals, model.temperature, model.strength)


def pool(reports: np.ndarray, variances: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The shares ``reports`` (with their ``variances``) and those of the sample's ``counts`` plus
    one, each weighted by the inverse of its variance; positive, summing to 1. A feature of one
    value has the share 1 on both sides and no variance: both variances are floored so that the
    weights stay finite (Mushroom's veil-type made every prediction NaN, hence the first class)."""
    total = counts.sum() + len(counts)
    sample = (counts + 1.0) / total
    sample_variance = sample * (1 - sample) / total
    weights = 1.0 / np.maximum(variances, 1e-12), 1.0 / np.maximum(sample_variance, 1e-12)
    pooled = (weights[0] * reports + weights[1] * sample) / (weights[0] + weights[1])
    pooled = np.maximum(pooled, 1e-9)
    return pooled / pooled.sum()
