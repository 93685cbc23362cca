"""Running sufficient statistics of a collection: one mergeable oracle state per input."""

from __future__ import annotations

import numpy as np

from participant.reporting import PerturbedInputs
from participant.spec import CollectionSpec
from protocols import OracleState


class CollectionStatistics:
    """Per input (class label, then each feature), the summed support of its reports.

    Adding reports, or another statistics object of the same spec, is exact: a store can keep
    these running and recompute them from stored reports to the same numbers.

    ``dummies`` is how many of the reports counted are, in expectation, a shuffler's dummy
    reports (:mod:`participant.dummies`): the states count them as reports, and :meth:`people`
    takes their known expectation out, which every estimate is built from.

    ``halves``: None, or the statistics of the two halves the reports were split into (by report
    id, :func:`aggregator.estimation.choice.half_of`), from which the ``auto`` estimator chooses;
    adding reports or merging forgets them.
    """

    def __init__(self, spec: CollectionSpec):
        self.spec = spec
        self.states = [OracleState.empty(o.state_size) for o in spec.oracles]
        self.dummies = 0.0
        self.removed = 0.0  # the dummies whose expectation :meth:`people` took out
        self.halves: tuple[CollectionStatistics, CollectionStatistics] | None = None

    def copy(self) -> CollectionStatistics:
        """An independent copy (states are immutable values, so the list is all that is copied)."""
        other = CollectionStatistics(self.spec)
        other.states = list(self.states)
        other.dummies, other.removed = self.dummies, self.removed
        other.halves = self.halves
        return other

    def people(self) -> CollectionStatistics:
        """The statistics of the people's reports alone: each input's count and support less what
        :attr:`dummies` dummy reports add to them in expectation, so that every count estimate is
        unbiased for the people's (counts become fractional; a count below zero, possible only
        where almost nobody reported, is taken as zero). Itself when there are no dummies."""
        if not self.dummies:
            return self
        from participant.dummies import dummy_expectation

        other = CollectionStatistics(self.spec)
        for i, (state, (share, mean)) in enumerate(zip(self.states, dummy_expectation(self.spec))):
            expected = self.dummies * share
            other.states[i] = OracleState(max(state.n - expected, 0.0), state.support - expected * mean)
        other.removed = self.removed + self.dummies
        other.halves = self.halves  # each half takes its own dummies out when it is used
        return other

    def derived(self, name: str, compute):
        """``compute(self)``, computed once for these statistics as they are now (an answer's
        parts that depend on the statistics alone, shared by every answer built from them):
        computed again once a state or the dummies changed (states are replaced, never changed
        in place, once built)."""
        memo = self.__dict__.setdefault("_derived", {})
        held = memo.get(name)
        if held is None or held[1] != self.dummies or len(held[0]) != len(self.states) or any(
            a is not b for a, b in zip(held[0], self.states)
        ):
            held = memo[name] = (tuple(self.states), self.dummies, compute(self))
        return held[2]

    @property
    def n_reports(self) -> int:
        return sum(s.n for s in self.states)

    @property
    def reports_per_input(self) -> np.ndarray:
        """How many reports each input received, shape ``(n + 1,)``."""
        return np.array([s.n for s in self.states])

    def add(self, input_index: int, reports: np.ndarray) -> None:
        """Add reports (rows in the protocol's report format) that all carry ``input_index``."""
        self.states[input_index] += self.spec.oracles[input_index].aggregate(reports)
        self.halves = None

    def add_population(self, perturbed: PerturbedInputs) -> None:
        for i, reports in enumerate(perturbed.reports):
            self.add(i, reports)

    def merge(self, other: CollectionStatistics) -> None:
        if other.spec != self.spec:
            raise ValueError("cannot merge statistics of different collections")
        self.states = [a + b for a, b in zip(self.states, other.states)]
        self.dummies += other.dummies
        self.halves = None

    def estimated_counts(self) -> list[np.ndarray]:
        """The oracles' unbiased count estimates per input: shape ``(k,)`` for the class input,
        ``(n_i · k,)`` (joint index ``a·k + c``) for feature ``i``. May be negative."""
        return [oracle.estimate(state) for oracle, state in zip(self.spec.oracles, self.states)]
