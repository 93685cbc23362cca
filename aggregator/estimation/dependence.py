"""Do the reports show that any feature depends on the class at all?

On car at ε ≤ 1 they mostly do not (a median p-value near 0.5), and a model that uses the
features there is no surer of anything than the class prior. How much the temperature's bootstrap
(:mod:`aggregator.estimation.calibration`) should fear that case is the probability of "no dependence" given
the reports, which :func:`null_probability` bounds from the p-value of :func:`dependence_p_value`
(approximate, used only as a weight). What the service reports (:mod:`aggregator.estimation.evidence`) is the calibrated test
of :func:`exact_feature_p_values`. Post-processing of the aggregated statistics: no privacy is
spent.
"""

from __future__ import annotations

import numpy as np

from .count_noise import sampled_cell_variances
from .statistics import CollectionStatistics


def dependence_p_value(stats: CollectionStatistics, class_count: np.ndarray) -> float:
    """The p-value of "no feature depends on the class", in [0, 1]; approximate (below).

    Per feature, each class's unbiased shares (its estimated counts over its expected count, from
    the pooled ``class_count`` shape ``(k,)``) deviate from the pooled marginal
    ``m = Σ_c π_c·share_c``; a deviation's noise variance is
    ``σ_ca² = (1 − π_c)²·v_ca + Σ_{c' ≠ c} π_c'²·v_c'a`` with ``v_ca`` the variance of class
    ``c``'s share of value ``a`` (the oracle's cell variance at the counts the reports estimate,
    plus the multinomial variance of the cell's true count among the reporters:
    :func:`~aggregator.estimation.count_noise.sampled_cell_variances`, over the squared expected count). The squared deviations over
    their variances, times ``(k − 1)/k``, form a χ² statistic of ``(k − 1)·d`` degrees of
    freedom; the features' p-values are combined by Fisher's method.

    The cells are taken as independent; DE's covary (a report lands in one), which
    :func:`exact_feature_p_values` accounts for. This one is used only as a weight
    (:func:`null_probability`, in the temperature's choice, :mod:`aggregator.estimation.calibration`)."""
    return combined_p_value(feature_p_values(stats, class_count))


def feature_p_values(stats: CollectionStatistics, class_count: np.ndarray) -> np.ndarray:
    """Each feature's p-value of no class dependence, shape ``(features with reports,)``, as
    :func:`dependence_p_value` describes."""
    # scipy is imported here, not at the top: the command line's --help must not load it.
    from scipy import stats as st

    spec, k = stats.spec, stats.spec.n_classes
    prior = class_count / class_count.sum()
    p = []
    for oracle, state, raw in zip(spec.oracles[1:], stats.states[1:], stats.estimated_counts()[1:]):
        if state.n == 0:
            continue
        d = raw.size // k
        expected = np.maximum(prior * state.n, 1e-9)[:, None]  # (k, 1)
        noise = sampled_cell_variances(oracle, state.n, raw).reshape(d, k).T / expected**2  # (k, d)
        shares = raw.reshape(-1, k).T / expected  # (k, d)
        weighted = prior[:, None] ** 2 * noise
        deviation_noise = (1 - prior[:, None]) ** 2 * noise + weighted.sum(axis=0) - weighted
        deviation = shares - prior @ shares
        statistic = (deviation**2 / deviation_noise).sum()
        p.append(st.chi2.sf(statistic * (k - 1) / k, (k - 1) * d))
    return np.array(p)


def gaussian_feature_p_values(stats: CollectionStatistics) -> list[float | None]:
    """Per prepared coordinate of a Gaussian collection, the p-value of "this coordinate's class
    means are equal" (None for every coordinate while the class input or the coordinate's inputs
    have no reports).

    The Wald statistic of the estimated class means' differences from the last class's, against
    their covariance, is χ² with ``k − 1`` degrees of freedom under equal means. The covariance
    (prepared units) holds each mean's noise and its entries' spread
    (:func:`~aggregator.estimation.gaussian.moment_variances`); between classes, the entries' covariance
    (one person's value sits in one class's entry; the one-bit reports of approach 2 are bounded
    without it) and the class prior's noise, by which every mean is divided, so that it counts
    where the means lie far from 0. The unclipped means are tested: clipped to the range their
    deviations are too small (on Australian's original features their χ² fell below its degrees
    of freedom). Under equal means it falls below 0.05 in 3–7 % of collections (two or three
    classes, approaches 1–3, ε 1 and 4, uniform and skewed values, 300 to 2,000 people;
    ``tests/test_evidence.py``)."""
    from scipy import stats as st

    from .class_prior import input_covariance
    from .gaussian import class_means_and_noise

    spec = stats.spec
    k, r = spec.n_classes, len(spec.continuous.output_names)
    first_inputs = [1 + 2 * j for j in range(r)] if spec.approach == 3 else [1] * r
    if stats.states[0].n == 0:
        return [None] * r
    prior, theta, variance = class_means_and_noise(stats)
    clipped = np.clip(theta, -1.0, 1.0)
    prior_covariance = input_covariance(spec.oracles[0], stats.states[0].n, prior)
    contrasts = np.hstack([np.eye(k - 1), -np.ones((k - 1, 1))])
    p_values: list[float | None] = []
    for j, i in enumerate(first_inputs):
        n = stats.states[i].n
        if n == 0:
            p_values.append(None)
            continue
        scaled = clipped[:, j] / prior
        covariance = np.diag(variance[:, j]) + np.outer(scaled, scaled) * prior_covariance
        if spec.approach != 2:
            entries = -np.outer(clipped[:, j], clipped[:, j]) / n
            covariance += entries - np.diag(np.diag(entries))
        difference = contrasts @ theta[:, j]
        statistic = difference @ np.linalg.solve(contrasts @ covariance @ contrasts.T, difference)
        p_values.append(float(st.chi2.sf(statistic, k - 1)))
    return p_values


def null_probability(p_value: float) -> float:
    """A lower bound on the posterior probability of the null hypothesis, in [0, 0.5], from its
    p-value at even prior odds: the Bayes factor for the null is at least ``−e·p·ln p`` for
    ``p < 1/e`` (Sellke, Bayarri and Berger 2001, "Calibration of p values for testing precise null
    hypotheses"), and at most 1 is assumed beyond. A p-value of 0.05 leaves 0.29, 0.01 leaves
    0.11, 0.001 leaves 0.018."""
    if p_value >= 1 / np.e:
        return 0.5
    factor = -np.e * p_value * np.log(max(p_value, 1e-300))
    return float(factor / (1 + factor))


def exact_feature_p_values(stats: CollectionStatistics, class_count: np.ndarray) -> list[float | None]:
    """Per feature input (None for one without reports), the p-value of "this feature does not
    depend on the class" from :func:`deviation_statistic`: the deviations of each class's shares
    from the pooled marginal against their full covariance.
    Under no dependence it falls below 0.05 in 2–7 % of collections, from OUE with two classes to
    DE with car's four (``python research/null_world.py``): unlike :func:`feature_p_values`, it may be
    read as a test."""
    from scipy import stats as st

    prior = class_count / class_count.sum()
    out: list[float | None] = []
    for oracle, state, raw in zip(stats.spec.oracles[1:], stats.states[1:], stats.estimated_counts()[1:]):
        if state.n == 0:
            out.append(None)
            continue
        out.append(float(st.chi2.sf(*deviation_statistic(oracle, state.n, raw, prior))))
    return out


def combined_p_value(p_values) -> float:
    """Fisher's combination of independent p-values (the features are reported by different
    people); 1.0 for none."""
    from scipy import stats as st

    p = np.array([v for v in p_values if v is not None], dtype=float)
    if not len(p):
        return 1.0
    return float(st.chi2.sf(-2 * np.log(np.maximum(p, 1e-300)).sum(), 2 * len(p)))


def deviation_statistic(oracle, n: int, raw: np.ndarray, prior: np.ndarray) -> tuple[float, int]:
    """``(T, (k − 1)·d)``: a feature's deviations of each class's shares from the pooled marginal
    (the class of the largest prior left out: the deviations of one value sum to zero under the
    weights ``π``) against their exact covariance, ``T = D'Σ⁻¹D``, χ² with that many degrees of
    freedom under no dependence and Gaussian noise. ``raw``: the feature's unbiased joint counts
    (index ``a·k + c``) from ``n`` reports; ``prior``: the class prior, shape ``(k,)``.

    The counts' covariance comes from the oracle's per-cell variances at the estimated counts
    (cells independent), or for DE is ``n·(diag(P) − PPᵀ)/(p − q)²`` with ``P`` the reported
    shares. A value's deviations depend on its own cells only, so the deviations' covariance is
    block diagonal, one ``(k − 1) × (k − 1)`` block per value, plus for DE a rank-one term
    (Sherman–Morrison): linear in the domain, where the full matrices were cubic."""
    from protocols import DirectEncoding

    k = len(prior)
    d = raw.size // k
    counts = np.clip(raw, 0.0, None)
    counts = counts * n / max(counts.sum(), 1e-12)
    # Per value, deviations = M·E·raw_a: E scales counts to shares, M takes the pooled share off.
    scale = 1.0 / np.maximum(prior * n, 1e-9)  # (k,)
    M = (np.eye(k) - prior[None, :])[np.delete(np.arange(k), prior.argmax())] * scale[None, :]  # (k − 1, k)
    by_value = raw.reshape(d, k)
    deviations = by_value @ M.T  # (d, k − 1)
    if isinstance(oracle, DirectEncoding):
        p, q = oracle.p, oracle.q
        reported = (q + (p - q) * counts / n).reshape(d, k)
        factor = n / (p - q) ** 2
        blocks = np.einsum("ik,ak,jk->aij", M, reported, M)  # M·diag(P_a)·Mᵀ
        rank_one = reported @ M.T  # (d, k − 1): u, the rank-one term's vector
    else:
        variances = oracle.variance(n, counts).reshape(d, k)
        factor = 1.0
        blocks = np.einsum("ik,ak,jk->aij", M, variances, M)
        rank_one = None
    solved = np.linalg.solve(blocks, deviations[..., None])[..., 0]  # B⁻¹D per value
    statistic = float((deviations * solved).sum())
    if rank_one is not None:
        solved_u = np.linalg.solve(blocks, rank_one[..., None])[..., 0]
        statistic += float((deviations * solved_u).sum()) ** 2 / (1.0 - float((rank_one * solved_u).sum()))
    return statistic / factor, (k - 1) * d
