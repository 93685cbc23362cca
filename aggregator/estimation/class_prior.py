"""The class prior from every input's reports, and how sure it is.

Every input carries the class: the class input's reports directly, each feature's joint reports
in the cells of each class (index ``a·k + c``). Each input's unbiased class shares are pooled,
each class's weighted by the inverse of its variance at the shares the reports estimate (the
plug-in, :func:`class_share_variances`; ``normsub`` projects the pooled shares onto the simplex).
Post-processing of the aggregated statistics: no privacy is spent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from participant.spec import CollectionSpec

from .statistics import CollectionStatistics

# The squared number of standard errors a reported standard error is read at (a 2-SE band): the
# pseudo-reports by which :func:`variance_prior` moves the shares toward even ones (Agresti and
# Coull's adjustment of a binomial share's Wald interval, z = 2).
Z_SQUARED = 4.0


def class_share_variance(oracle, n: int, k: int) -> float:
    """Variance of one class's share estimated from an input's ``n`` reports: the sum of the
    ``d/k`` cells holding that class, over ``n``, for a class of share ``1/k``. The cells of the
    unary and histogram encodings are independent, so their variances add; DE's cells are not (a
    report lands in exactly one), and the sum of a set of cells is itself a randomised response with
    ``ρ = q·d/k + (p − q)/k``, of variance ``n·ρ(1 − ρ)/(p − q)²`` (the cell variances' sum
    overstates it: a feature input with 4 values at ε = 1 by about a fifth)."""
    from protocols import DirectEncoding

    cells = oracle.domain_size // k
    if isinstance(oracle, DirectEncoding):
        p, q = oracle.p, oracle.q
        rho = q * cells + (p - q) / k
        return rho * (1 - rho) / ((p - q) ** 2 * n)
    return cells * oracle.variance(n)[0] / n**2


def class_share_variances(oracle, n: float, prior: np.ndarray) -> np.ndarray:
    """The variance of each class's share estimated from an input's ``n`` reports when the class
    prior is ``prior`` (shape ``(k,)``): the diagonal of :func:`input_covariance`, the plug-in
    variances, where :func:`class_share_variance` takes every class at ``1/k``."""
    return np.diag(input_covariance(oracle, n, np.asarray(prior, dtype=float)))


@dataclass(frozen=True)
class PooledShares:
    """The pooled unbiased class shares ``shares`` (shape ``(k,)``, summing to about 1, entries
    possibly outside [0, 1]), and each contributing input's index and its pooling weights, one
    per class (shape ``(inputs, k)``)."""

    shares: np.ndarray
    inputs: list[int]
    weights: np.ndarray


def class_count_inputs(spec: CollectionSpec) -> list[int]:
    """The inputs whose reports carry the class counts: every input of a discrete collection (the
    class input, and each feature jointly with the class), the class input alone of a Gaussian
    one (its class-hiding vectors hold values, not counts)."""
    return list(range(spec.n_inputs)) if spec.model == "discrete" else [0]


def pooled_class_shares(stats: CollectionStatistics, counts: list[np.ndarray] | None = None) -> PooledShares | None:
    """The unbiased class shares (class counts over reports) of every input that carries the
    class counts (:func:`class_count_inputs`), pooled class by class with the weights
    ``1 / class_share_variances`` at the shares a first pooling (at even shares' variances)
    estimates; None when none of them has reports. ``counts``: the statistics'
    ``estimated_counts()``, when the caller has them already."""
    from .simplex import project_to_simplex

    spec, k = stats.spec, stats.spec.n_classes
    inputs, shares, oracles, reports = [], [], [], []
    for i in class_count_inputs(spec):
        oracle, state = spec.oracles[i], stats.states[i]
        if state.n == 0:
            continue
        raw = oracle.estimate(state) if counts is None else counts[i]
        inputs.append(i)
        shares.append(raw.reshape(-1, k).sum(axis=0) / state.n)
        oracles.append(oracle)
        reports.append(state.n)
    if not inputs:
        return None
    shares = np.array(shares)
    first = np.average(shares, axis=0, weights=[1.0 / class_share_variance(o, n, k) for o, n in zip(oracles, reports)])
    weights = pooling_weights(oracles, reports, project_to_simplex(first, 1.0))
    return PooledShares((weights * shares).sum(axis=0) / weights.sum(axis=0), inputs, weights)


def pooling_weights(oracles, reports, prior: np.ndarray) -> np.ndarray:
    """Each input's weight for each class's share, shape ``(inputs, k)``: the inverse of its
    variance (:func:`class_share_variances`) when the class prior is ``prior``."""
    return np.array([1.0 / class_share_variances(o, n, prior) for o, n in zip(oracles, reports)])


def input_covariance(oracle, n: float, prior: np.ndarray) -> np.ndarray:
    """The covariance (shape ``(k, k)``) of one input's class shares from its ``n`` reports when
    the class prior is ``prior`` (shape ``(k,)``).

    For DE a report lands in one class's set of cells with probability ``ρ_c = q·d/k + (p − q)·π_c``,
    so the sets' counts are multinomial: ``C = (diag ρ − ρρᵀ) / (n (p − q)²)``. Other oracles'
    cells are independent: class ``c``'s share has the variance of its cells' sum, each cell's at
    its share of ``π_c`` spread evenly over the feature's values, and the classes do not covary."""
    from protocols import DirectEncoding

    k = len(prior)
    cells = oracle.domain_size // k
    if isinstance(oracle, DirectEncoding):
        p, q = oracle.p, oracle.q
        rho = q * cells + (p - q) * prior
        return (np.diag(rho) - np.outer(rho, rho)) / (n * (p - q) ** 2)
    held = np.tile(prior * n / cells, cells)  # joint index a·k + c
    return np.diag(oracle.variance(n, held).reshape(-1, k).sum(axis=0)) / n**2


def shares_covariance(oracles, reports, prior: np.ndarray) -> np.ndarray:
    """The covariance (shape ``(k, k)``) of the class shares pooled as
    :func:`pooled_class_shares` pools them, from inputs with these ``oracles`` and ``reports``
    reports each (positive; not necessarily whole), when the class prior is ``prior``:
    ``Σ_i (w_i w_iᵀ) ∘ C_i / (W Wᵀ)``, ``w_i`` input ``i``'s weights per class
    (:func:`pooling_weights`), ``W`` their sum and ``C_i`` the :func:`input_covariance` of input ``i``."""
    weights = pooling_weights(oracles, reports, prior)
    total = sum(np.outer(w, w) * input_covariance(o, n, prior) for o, n, w in zip(oracles, reports, weights))
    summed = weights.sum(axis=0)
    return total / np.outer(summed, summed)


def pooled_covariance(stats: CollectionStatistics, pooled: PooledShares, prior: np.ndarray) -> np.ndarray:
    """The covariance of ``pooled.shares`` (shape ``(k, k)``) when the class prior is ``prior``
    (:func:`shares_covariance` of the inputs that have reports)."""
    oracles = [stats.spec.oracles[i] for i in pooled.inputs]
    return shares_covariance(oracles, [stats.states[i].n for i in pooled.inputs], prior)


def majority_lead(shares: np.ndarray, covariance: np.ndarray) -> float:
    """How many standard errors of their difference the largest of ``shares`` (shape ``(k,)``,
    ``k ≥ 2``) leads the next largest, ``covariance`` (shape ``(k, k)``) being the shares'."""
    top, second = np.argsort(-shares, kind="stable")[:2]
    spread = covariance[top, top] + covariance[second, second] - 2 * covariance[top, second]
    return float((shares[top] - shares[second]) / np.sqrt(spread))


def people_surveyed(stats: CollectionStatistics) -> float:
    """How many people the statistics' reports come from: every report of a one-report collection
    is one person's; otherwise every person reports every input."""
    if stats.spec.budget == "one-report":
        return float(stats.n_reports)
    return float(max(s.n for s in stats.states))


def variance_prior(prior: np.ndarray, reports: float) -> np.ndarray:
    """The class prior (shape ``(k,)``) at which to evaluate the variance of shares estimated from
    ``reports`` reports: ``(n·π̂ + Z²/k) / (n + Z²)``, the estimate moved toward even shares by
    :data:`Z_SQUARED` pseudo-reports. The plug-in at ``π̂`` itself collapses where few people
    report the class: four reports naming one class at ε = 4 give ``π̂ = (1, 0)`` and a standard
    error of 0.07 where the shares' spread is 0.2. The adjustment vanishes like ``1/n``."""
    prior = np.asarray(prior, dtype=float)
    return (reports * prior + Z_SQUARED / len(prior)) / (reports + Z_SQUARED)


def sampled_covariance(oracle, n: float, people: float, prior: np.ndarray) -> np.ndarray:
    """The covariance (shape ``(k, k)``) of one input's class shares from its ``n`` reports as
    estimates of the shares of the ``people`` surveyed, when the class prior is ``prior``: the
    mechanism's noise given who reported, plus the spread of the reporters' own shares about the
    people's, ``(1 − n/people)·(diag π − ππᵀ)/n`` (a random ``n`` of ``people``, drawn without
    replacement). :func:`input_covariance` counts that spread as if the reporters were drawn with
    replacement (DE's multinomial) or not at all (the other oracles' cells given the counts); the
    difference is a factor up to ``1/(1 − n/people)`` in variance where the noise is small (1.5
    where three inputs share the people)."""
    from protocols import DirectEncoding

    n = max(float(n), 1.0)
    spread = (np.diag(prior) - np.outer(prior, prior)) / n
    drawn = min(n / max(people, n), 1.0)
    if isinstance(oracle, DirectEncoding):
        return input_covariance(oracle, n, prior) - drawn * spread
    return input_covariance(oracle, n, prior) + (1 - drawn) * spread


def reported_covariance(stats: CollectionStatistics, pooled: PooledShares, prior: np.ndarray) -> np.ndarray:
    """The covariance (shape ``(k, k)``) of ``pooled.shares`` as estimates of the shares of the
    people surveyed, for reading as standard errors: each input's :func:`sampled_covariance` at
    :func:`variance_prior` of ``prior`` (the input's reports as pseudo-count weight), pooled with
    ``pooled.weights`` as :func:`shares_covariance` pools them."""
    people = people_surveyed(stats)
    total = np.zeros((len(prior), len(prior)))
    for i, w in zip(pooled.inputs, pooled.weights):
        n = stats.states[i].n
        total += np.outer(w, w) * sampled_covariance(stats.spec.oracles[i], n, people, variance_prior(prior, n))
    summed = pooled.weights.sum(axis=0)
    return total / np.outer(summed, summed)
