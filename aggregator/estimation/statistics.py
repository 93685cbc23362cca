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
    """

    def __init__(self, spec: CollectionSpec):
        self.spec = spec
        self.states = [OracleState.empty(o.state_size) for o in spec.oracles]

    def copy(self) -> CollectionStatistics:
        """An independent copy (states are immutable values, so the list is all that is copied)."""
        other = CollectionStatistics(self.spec)
        other.states = list(self.states)
        return other

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

    def add_population(self, perturbed: PerturbedInputs) -> None:
        for i, reports in enumerate(perturbed.reports):
            self.add(i, reports)

    def merge(self, other: CollectionStatistics) -> None:
        if other.spec != self.spec:
            raise ValueError("cannot merge statistics of different collections")
        self.states = [a + b for a, b in zip(self.states, other.states)]

    def estimated_counts(self) -> list[np.ndarray]:
        """The oracles' unbiased count estimates per input: shape ``(k,)`` for the class input,
        ``(n_i · k,)`` (joint index ``a·k + c``) for feature ``i``. May be negative."""
        return [oracle.estimate(state) for oracle, state in zip(self.spec.oracles, self.states)]
