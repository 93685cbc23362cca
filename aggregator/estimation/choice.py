"""Which estimator a collection needs, chosen from its own reports: ``auto``.

The reports are split in two halves (:func:`half_of`, by report id, so a collection's split never
changes and a re-posted report, stored once, changes nothing). Each candidate of
:data:`CANDIDATES` is fitted on one half and scored on the other by the held-out cross-entropy

    S(A → B) = Σ_i Σ_v f̂_B,i(v) · log π_A,i(v) / n_B

where ``i`` runs over the inputs (the class, and each feature jointly with the class), ``f̂_B,i``
are half B's unbiased count estimates and ``π_A,i`` the model's probability of the input's value
(``P(c)`` for the class input, ``P(c)·P(a | c)`` for a feature's joint value ``a·k + c``). The
estimates are linear in B's reports, so ``S`` is unbiased for the mean log-probability the model
fitted on A gives the values B's people hold, although no value is seen (a proper scoring rule, so a
model scores best in expectation when its probabilities are the people's). Halves swapped and
averaged: ``D_j`` is candidate ``j``'s mean score minus the default's.

Given A, ``D_j(A → B)`` is a fixed weighting ``w`` of B's estimates, so its variance is
``Σ w² · Var f̂_B`` over the cells (:func:`~aggregator.estimation.count_noise.sampled_cell_variances`:
the randomiser's noise and the people's sampling; covariances between one input's cells left out),
and the two directions' are averaged as independent: ``Var D_j ≈ (V_AB + V_BA) / 4``. A candidate
replaces the default only when ``D_j > Z · SE(D_j)``; of several, the one with the largest ``D_j``.
:data:`Z` and the score (:data:`SCORE`, of :data:`SCORES`) are chosen leaving one data set out
over the fourteen problems (``research/estimator_choice.py``). There the held-out score disagrees
with accuracy where ``paper`` classifies better (small files at low ε): it scores ``paper`` worse
or level on average, its probabilities being worse though its predictions are better, so the rule
leaves the default where the default is no worse and otherwise rarely; it is offered as ``auto``,
not made the default. No rule reading the reports could do better on every population: the
reports' distribution depends only on the per-input marginals, and two populations with the same
marginals can have either estimator classify better (``research/choice_bound.py``). Everything
here reads aggregated statistics: no privacy is spent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .count_noise import sampled_cell_variances
from .statistics import CollectionStatistics

DEFAULT = "normsub"
CANDIDATES = ("normsub", "paper", "ibu")  # the default first
# Standard errors of the score difference by which a candidate must beat the default, and the
# score: research/estimator_choice.py chose them leaving one data set out of the fourteen problems
# (joint and 3 for ten of the fourteen held out; on all fourteen, joint and 3).
Z = 3.0
# Nats (or accuracy) per report below which a gain is float rounding, not evidence.
ROUNDING = 1e-9


@dataclass(frozen=True)
class Choice:
    """The ``chosen`` estimator's name; per candidate (in :data:`CANDIDATES` order) its mean
    held-out score minus the default's (``gains``, nats per report) and that difference's
    standard error (``errors``; 0 for the default)."""

    chosen: str
    gains: dict[str, float]
    errors: dict[str, float]

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "gains": self.gains, "errors": self.errors, "z": Z}


def half_of(report_ids: np.ndarray) -> np.ndarray:
    """Which half (0 or 1, shape ``(m,)``) each report falls in, from its id alone: ``report_ids``
    is an ``(m, L)`` uint8 array of the ids' bytes (random bytes chosen by the device); the lowest
    bit of their exclusive-or, so every byte counts and the same id always falls in the same half."""
    ids = np.asarray(report_ids, dtype=np.uint8)
    return (np.bitwise_xor.reduce(ids, axis=1) & 1).astype(np.int8)


SCORES = ("joint", "conditional", "accuracy")
SCORE = "joint"


def joint_log_probabilities(model, score: str = "joint") -> list[np.ndarray]:
    """The model's log-probability of each input's values, in the layout of the estimates:
    ``log P(c)`` (shape ``(k,)``) for the class input, and for feature ``i`` at joint index
    ``a·k + c`` (shape ``(n_i·k,)``) ``log P(c) + log P(a | c)`` (``score`` ``"joint"``) or
    ``log P(c | a)`` from that feature alone (``"conditional"``); or, for ``"accuracy"``, 1 where
    ``c`` is the class the input's value alone predicts (the most probable; the prior's for the
    class input) and 0 elsewhere, so that the score is the inputs' mean held-out accuracy."""
    prior = model.class_log_prior
    if score == "accuracy":
        out = [np.eye(len(prior))[np.argmax(prior)]]
        for table in model.feature_log_prob:
            joint = (table + prior[:, None]).T  # (n_i, k)
            out.append(np.eye(len(prior))[np.argmax(joint, axis=1)].ravel())
        return out
    out = [prior]
    for table in model.feature_log_prob:
        joint = (table + prior[:, None]).T  # (n_i, k)
        if score == "conditional":
            joint = joint - np.logaddexp.reduce(joint, axis=1, keepdims=True)
        out.append(joint.ravel())
    return out


def _fits(stats: CollectionStatistics, build, candidates, score: str = SCORE) -> list[list[np.ndarray]]:
    return [joint_log_probabilities(build(stats, name), score) for name in candidates]


def held_out(fitted: list[list[np.ndarray]], scored: CollectionStatistics) -> tuple[np.ndarray, np.ndarray]:
    """Each fitted candidate's held-out score on ``scored`` minus the first candidate's (nats per
    report, shape ``(J,)``), and the variance of each difference (shape ``(J,)``)."""
    spec = scored.spec
    n = max(scored.n_reports, 1)
    estimates = scored.estimated_counts()
    variances = [
        sampled_cell_variances(oracle, state.n, estimate)
        for oracle, state, estimate in zip(spec.oracles, scored.states, estimates)
    ]
    f = np.concatenate(estimates)
    v = np.concatenate(variances)
    logs = np.stack([np.concatenate(per_input) for per_input in fitted])  # (J, cells)
    w = logs - logs[0]
    return w @ f / n, (w**2) @ v / n**2


def choose_estimator(
    halves: tuple[CollectionStatistics, CollectionStatistics], build, candidates=CANDIDATES, score: str = SCORE
) -> Choice:
    """The :class:`Choice` among ``candidates`` (the default first) from a collection's two halves
    (each the statistics of the reports :func:`half_of` puts there; dummies in expectation as in
    :meth:`CollectionStatistics.people`), each candidate's model ``build(statistics, name)``
    (:func:`aggregator.estimation.estimators.estimator_choice` passes the estimators). The default
    where either half is empty."""
    first, second = (h.people() for h in halves)
    zeros = dict.fromkeys(candidates, 0.0)
    if first.n_reports == 0 or second.n_reports == 0:
        return Choice(candidates[0], zeros, dict(zeros))
    gain_ab, var_ab = held_out(_fits(first, build, candidates, score), second)
    gain_ba, var_ba = held_out(_fits(second, build, candidates, score), first)
    gains = (gain_ab + gain_ba) / 2
    errors = np.sqrt((var_ab + var_ba) / 4)
    return Choice(pick(gains, errors, candidates), dict(zip(candidates, map(float, gains))), dict(zip(candidates, map(float, errors))))


def pick(gains: np.ndarray, errors: np.ndarray, candidates=CANDIDATES, z: float = Z) -> str:
    """The candidate with the largest gain over the default among those whose gain exceeds ``z``
    standard errors; the default (the first) if none does."""
    # A gain within float rounding of its bound is a tie (identical models differ by 1e-15).
    beating = (gains - z * errors > ROUNDING) & (np.arange(len(candidates)) > 0)
    if not beating.any():
        return candidates[0]
    return candidates[int(np.argmax(np.where(beating, gains, -np.inf)))]
