"""From estimated counts to Naive Bayes probabilities.

Every estimator reads only the aggregated statistics (post-processing), so none costs privacy.

- ``paper``: section 3.1 of Yilmaz et al. as written. ``P(C_j) = E_j / Σ E``, from the class
  input's reports alone; ``P(F_i = y | C_z) = E_{y,z} / Σ_h E_{h,z}`` from feature ``i``'s
  reports; every estimate that is not positive is set to 1 first.
- ``normsub`` (the default): each input's estimated histogram is projected onto the counts it can
  be (non-negative, summing to the number of reports on that input: "Norm-Sub", the Euclidean
  projection onto the scaled simplex); the class prior pools the class-count estimates of every
  input (the class input's histogram and each feature's joint histogram summed over feature
  values), each class's weighted by the inverse of its plug-in variance, then projected onto the
  simplex; each class's conditionals are shrunk toward the feature's pooled marginal (what every
  class shares, so that a feature telling the classes nothing gains no false class signal) by the
  smaller of an empirical-Bayes weight (the share of the counts' spread that the noise explains)
  and a pseudo-count of one standard deviation per cell, both at strength 1 (the empirical-Bayes
  weight itself; a bootstrap choice of the strength per collection gained nothing out of sample,
  ``research/default_choice.py``). The class probabilities are then softened by a temperature chosen
  by a parametric bootstrap of the collection's own reports (:mod:`aggregator.estimation.calibration`),
  which changes no prediction and keeps the noise of many features from making the model sure of
  anything.
- ``ibu``: ``normsub`` with each DE input's histogram the maximum-likelihood one.
- ``auto``: one of ``normsub``, ``paper`` and ``ibu``, chosen per collection by the held-out
  cross-entropy of half its reports under each fitted on the other half
  (:mod:`aggregator.estimation.choice`, :func:`estimator_choice`); needs the statistics' ``halves``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from .calibration import choose_temperature
from .choice import CANDIDATES, SCORE, Choice, choose_estimator
from .class_prior import pooled_class_shares
from .count_noise import class_cell_variances
from .gaussian import GaussianModel, gaussian_estimator
from .model import NaiveBayesModel
from .simplex import project_to_simplex
from .smoothing import REFERENCE, Unsmoothed
from .statistics import CollectionStatistics


def paper_estimator(stats: CollectionStatistics, temperature: float | None = None) -> NaiveBayesModel:
    """Section 3.1 exactly: raw estimates, non-positive ones set to 1; class probabilities at
    ``temperature`` (left out: 1, the paper's)."""
    spec, k = stats.spec, stats.spec.n_classes
    counts = stats.estimated_counts()
    class_count = np.where(counts[0] > 0, counts[0], 1.0)
    category_count = []
    for joint in counts[1:]:
        joint = np.where(joint > 0, joint, 1.0)
        # Joint index a·k + c: rows are feature values, columns classes; the model wants (k, n_i).
        category_count.append(joint.reshape(-1, k).T)
    return NaiveBayesModel(spec, class_count, category_count, 1.0 if temperature is None else temperature)


def normsub_estimator(
    stats: CollectionStatistics,
    strength: float | None = None,
    target: str = "marginal",
    temperature: float | None = None,
) -> NaiveBayesModel:
    """Norm-Sub consistent histograms, inverse-variance pooled class priors, and conditionals
    smoothed toward ``target`` (the feature's pooled marginal, or uniform) by
    :func:`~aggregator.estimation.smoothing.smooth_conditionals` with ``strength`` (left out:
    :data:`~aggregator.estimation.smoothing.REFERENCE`, 1); class probabilities
    at ``temperature`` (left out: the one :func:`~aggregator.estimation.calibration.choose_temperature`
    picks, which changes no prediction)."""
    derive = partial(normsub_unsmoothed, target=target)
    base = derive(stats)
    if strength is None:
        strength = REFERENCE
    if temperature is None:
        temperature = choose_temperature(stats, derive, base, strength)
    return base.model(stats.spec, strength, temperature)


def normsub_unsmoothed(stats: CollectionStatistics, target: str = "marginal") -> Unsmoothed:
    """``normsub`` before its smoothing: the pooled class counts and the Norm-Sub tables, to be
    smoothed toward ``target``."""
    spec, k = stats.spec, stats.spec.n_classes
    counts = stats.estimated_counts()

    # Class proportions from every input, from the unbiased (unprojected) estimates, each weighted
    # by the inverse variance of its class-count estimate: a feature input sums n_i cells per
    # class, so its class count carries n_i cells' noise.
    pooled = pooled_class_shares(stats, counts)
    prior = np.full(k, 1.0 / k) if pooled is None else project_to_simplex(pooled.shares, 1.0)
    class_count = np.maximum(prior * stats.n_reports, 1.0)

    # Every feature input of one domain size is projected in one call (connect-4: 42 in one).
    tables: list[np.ndarray] = [np.empty(0)] * (len(counts) - 1)
    sizes: dict[int, list[int]] = {}
    for i, raw in enumerate(counts[1:]):
        sizes.setdefault(raw.size, []).append(i)
    for inputs in sizes.values():
        totals = [stats.states[i + 1].n for i in inputs]
        for i, projected in zip(inputs, project_to_simplex(np.stack([counts[i + 1] for i in inputs]), totals)):
            tables[i] = projected.reshape(-1, k).T  # (k, n_i) counts
    # Each class's cells' mean variance at the counts the reports estimate (aggregator.estimation.count_noise).
    variances = [
        class_cell_variances(oracle, state.n, raw, k)[:, None]
        for oracle, state, raw in zip(spec.oracles[1:], stats.states[1:], counts[1:])
    ]
    return Unsmoothed(class_count, tables, variances, target)


@dataclass(frozen=True)
class IBUResult:
    """``counts`` (shape ``(d,)``), the EM ``iterations`` run, and whether the last step moved
    every share by less than the tolerance (``converged``)."""

    counts: np.ndarray
    iterations: int
    converged: bool


def iterative_bayesian_update(oracle, state, tolerance: float = 1e-10, max_iterations: int = 50_000) -> IBUResult:
    """The maximum-likelihood histogram of the values behind a DE input's reports: EM on the
    perturbation matrix (Iterative Bayesian Update; Agrawal and Aggarwal 2001, ElSalamouny and
    Palamidessi 2020). A DE report equals the true value with probability ``p`` and each other
    value with ``q``, so the output distribution is ``q + θ_o (p − q)`` and one EM step is
    ``θ_v ← θ_v (p·r_v + q·(Σ r − r_v))`` with ``r_o = f_o / (q + θ_o (p − q))`` for the observed
    output frequencies ``f``, renormalised. It stops when no share moves by ``tolerance``; EM
    creeps near empty cells, so at d = 64 that takes thousands of steps (a fixed 2,000 left cells
    up to 0.006 from the maximum)."""
    d = oracle.domain_size
    if state.n == 0:
        return IBUResult(np.zeros(d), 0, True)
    observed = state.support / state.n
    p, q = oracle.p, oracle.q
    theta = np.full(d, 1.0 / d)
    for iteration in range(1, max_iterations + 1):
        ratio = observed / (q + theta * (p - q))
        updated = theta * (p * ratio + q * (ratio.sum() - ratio))
        updated /= updated.sum()
        moved = np.abs(updated - theta).max()
        theta = updated
        if moved < tolerance:
            return IBUResult(theta * state.n, iteration, True)
    return IBUResult(theta * state.n, max_iterations, False)


def direct_encoding_mle(oracle, state) -> np.ndarray:
    """The maximum-likelihood histogram behind a DE input's reports, exactly (counts, shape
    ``(d,)``): the fixed point :func:`iterative_bayesian_update` creeps toward.

    Output ``o`` has probability ``q + (p − q)·θ_o``, so the log-likelihood
    ``Σ_o f_o log(q + (p − q)θ_o)`` is separable and concave; on the simplex its maximum (KKT) is
    ``θ_o = max(0, f_o/λ − q/(p − q))`` with ``λ`` making the shares sum to one: water-filling,
    solved by sorting."""
    d = oracle.domain_size
    if state.n == 0:
        return np.zeros(d)
    f = state.support / state.n
    c = oracle.q / (oracle.p - oracle.q)
    ordered = np.sort(f)[::-1]
    ranks = np.arange(1, d + 1)
    lam = np.cumsum(ordered) / (1 + ranks * c)  # λ if the r largest outputs carry every share
    r = np.flatnonzero(ordered / lam - c > 0)[-1] + 1  # the largest r whose r-th share stays positive
    return np.maximum(f / lam[r - 1] - c, 0.0) * state.n


def ibu_estimator(
    stats: CollectionStatistics, strength: float | None = None, temperature: float | None = None
) -> NaiveBayesModel:
    """``normsub`` with each DE input's histogram the maximum-likelihood one
    (:func:`direct_encoding_mle`, where Iterative Bayesian Update converges) instead of Norm-Sub
    (other protocols' inputs as in ``normsub``), then the same smoothing (``strength`` left out:
    1); class probabilities at ``temperature`` (left out: 1)."""
    base = ibu_unsmoothed(stats)
    return base.model(stats.spec, REFERENCE if strength is None else strength, 1.0 if temperature is None else temperature)


def ibu_unsmoothed(stats: CollectionStatistics) -> Unsmoothed:
    """``ibu`` before its smoothing: ``normsub``'s, with each DE input's table the maximum-likelihood one."""
    from protocols import DirectEncoding

    spec, k = stats.spec, stats.spec.n_classes
    base = normsub_unsmoothed(stats)
    tables = list(base.tables)
    for i, (oracle, state) in enumerate(zip(spec.oracles[1:], stats.states[1:])):
        if isinstance(oracle, DirectEncoding):
            tables[i] = direct_encoding_mle(oracle, state).reshape(-1, k).T
    return Unsmoothed(base.class_count, tables, base.cell_variances, base.target)


def estimator_choice(halves, candidates=CANDIDATES, score: str = SCORE) -> Choice:
    """:func:`~aggregator.estimation.choice.choose_estimator` among these estimators (each at
    temperature 1, which changes no probability the score reads)."""
    return choose_estimator(halves, lambda stats, name: ESTIMATORS[name](stats, temperature=1.0), candidates, score)


def auto_estimator(stats: CollectionStatistics, temperature: float | None = None) -> NaiveBayesModel:
    """The model of the estimator :func:`estimator_choice` picks from ``stats.halves`` (class
    probabilities at ``temperature``, left out: that estimator's own), built from all of ``stats``;
    the :class:`~aggregator.estimation.choice.Choice` is kept as the model's ``choice``. Raises
    ValueError where ``stats`` carries no halves."""
    if stats.halves is None:
        raise ValueError("the auto estimator chooses from the reports split in halves; these statistics carry none")
    choice = estimator_choice(stats.halves)
    model = ESTIMATORS[choice.chosen](stats, temperature=temperature)
    model.choice = choice
    return model


ESTIMATORS: dict[str, Callable[[CollectionStatistics], NaiveBayesModel]] = {
    "paper": paper_estimator,
    "normsub": normsub_estimator,
    "ibu": ibu_estimator,
    "auto": auto_estimator,
}


def build_model(
    stats: CollectionStatistics,
    estimator: str = "normsub",
    temperature: float | None = None,
    strength: float | None = None,
):
    """The Naive Bayes model the named estimator assembles from ``stats``: a
    :class:`NaiveBayesModel` for a discrete spec, a :class:`~aggregator.estimation.gaussian.GaussianModel`
    for a Gaussian one. ``temperature``: the discrete model's (left out: the estimator's own
    choice). It changes no prediction, so a caller that scores only predictions passes 1 and
    skips ``normsub``'s bootstrap of it. ``strength``: the smoothing strength (left out: 1);
    built from the people's reports alone (:meth:`CollectionStatistics.people`);
    raises ValueError (:func:`strength_refused` says why) where the
    estimator or the model does not smooth."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    if strength is not None and (refused := strength_refused(stats.spec, estimator)):
        raise ValueError(refused)
    stats = stats.people()  # a shuffler's dummy reports out, in expectation
    if stats.spec.model == "gaussian" and estimator == "auto":
        raise ValueError("the auto estimator chooses among the discrete model's estimators; a gaussian model has none to choose")
    if stats.spec.model == "gaussian":
        return gaussian_estimator(stats, estimator)
    build = ESTIMATORS[estimator]
    # An estimator registered beside these (a bench's variant) may take the statistics alone.
    accepted = inspect.signature(build).parameters
    given = {"temperature": temperature, "strength": strength}
    return build(stats, **{name: value for name, value in given.items() if value is not None and name in accepted})


def strength_refused(spec, estimator: str) -> str | None:
    """Why ``estimator`` cannot build ``spec``'s model at a given smoothing strength, or None if it can."""
    if spec.model == "gaussian":
        return "a gaussian model has no smoothing strength"
    if "strength" not in inspect.signature(ESTIMATORS[estimator]).parameters:
        return f"the {estimator} estimator does not smooth: it has no strength"
    return None


def model_from_dict(data: dict):
    """The model a ``to_dict()`` (or the service's /model answer) describes."""
    if "theta" in data:
        return GaussianModel.from_dict(data)
    return NaiveBayesModel.from_dict(data)
