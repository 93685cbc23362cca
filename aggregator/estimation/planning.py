"""Before a collection runs: how surely will its reports name the most common class?

With uneven classes and a small ε the reports can name another class the most common, and then
no model built from them, nor the constant classifier they give, reaches the majority class's
accuracy (documentation, *Estimators*: car at ε = 0.5 in about one collection in twenty-five). How
often depends on the class shares, the number of people, the spec's oracles and how many people
report each input, which an operator knows, or can guess from a public sample, before anyone
reports. Nothing here reads a report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from participant.reporting import input_probabilities
from participant.spec import CollectionSpec

from .class_prior import class_count_inputs, shares_covariance

# Expected accuracy the reports' constant classifier may lose before a larger class share is offered.
TOLERATED_COST = 0.005
# The class shares offered; the features need some of the reports too.
CLASS_SHARES = np.round(np.arange(0.05, 0.951, 0.05), 2)


@dataclass(frozen=True)
class MajorityOutlook:
    """``wrong``: the probability that the pooled class shares put another class than the most
    common one highest; ``cost``: the accuracy the reports' constant classifier then loses to the
    majority class, on average over collections (a share of the people)."""

    wrong: float
    cost: float


def expected_reports(spec: CollectionSpec, people: float) -> np.ndarray:
    """How many reports each input receives on average from ``people`` people, shape
    ``(n + 1,)``: one each, spread by :func:`~participant.reporting.input_probabilities`, or every
    input from every person (budgets ``per-input`` and ``split``). An ``"assigned"`` collection is
    taken as spread evenly."""
    if spec.budget != "one-report":
        return np.full(spec.n_inputs, float(people))
    return people * input_probabilities(spec)


def majority_outlook(
    spec: CollectionSpec, prior, people: float, draws: int = 200_000, seed: int = 0
) -> MajorityOutlook:
    """The :class:`MajorityOutlook` of a collection under ``spec`` from ``people`` people whose
    classes are spread as ``prior`` (shape ``(k,)``, summing to 1): the pooled shares taken as
    Gaussian, with the covariance of :func:`~aggregator.estimation.class_prior.shares_covariance` at
    :func:`expected_reports` of the inputs that carry the class counts (every input of a discrete
    collection, the class input of a Gaussian one), and ``draws`` of them drawn (seeded)."""
    prior = np.asarray(prior, dtype=float)
    inputs = class_count_inputs(spec)
    reports = expected_reports(spec, people)[inputs]
    covariance = shares_covariance([spec.oracles[i] for i in inputs], reports, prior)
    # The shares sum to one, so the covariance is singular: draw along its eigenvectors.
    values, vectors = np.linalg.eigh(covariance)
    noise = np.random.default_rng(seed).standard_normal((draws, len(prior))) * np.sqrt(np.clip(values, 0, None))
    named = (prior + noise @ vectors.T).argmax(axis=1)
    top = int(prior.argmax())
    return MajorityOutlook(float(np.mean(named != top)), float(np.mean(prior[top] - prior[named])))


def class_share_for(spec: CollectionSpec, prior, people: float, cost: float = TOLERATED_COST) -> float | None:
    """Where ``spec``'s own :func:`majority_outlook` costs more than ``cost``, the smallest of
    :data:`CLASS_SHARES` above its share of the class input that costs at most ``cost``; None if
    ``spec`` costs no more already, if no share does, or if ``spec`` cannot state a class share
    (it needs one report per person and inputs chosen at random)."""
    from dataclasses import replace

    if spec.budget != "one-report" or spec.input_selection != "uniform":
        return None
    if majority_outlook(spec, prior, people).cost <= cost:
        return None
    today = input_probabilities(spec)[0]
    for share in CLASS_SHARES[CLASS_SHARES > today + 1e-9]:
        if majority_outlook(replace(spec, class_share=float(share)), prior, people).cost <= cost:
            return float(share)
    return None
