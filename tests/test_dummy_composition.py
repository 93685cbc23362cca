"""The balanced-dummies study (research/dummy_composition.py): its composition is the one it
describes, and its exact flooded view agrees, for uniform dummies, with a computation of its own
(each dummy one multinomial draw over every (input, output))."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multinomial

from participant import CollectionSpec, Feature
from participant.dummies import dummy_expectation
from protocols.shuffling import flooded_epsilon
from research.dummy_composition import balanced_counts, composed_states, flooded_views, hockey_stick


def test_the_composition_is_each_value_floor_or_ceiling_and_the_remainder_uniform():
    rng = np.random.default_rng(11)
    for count, d in ((0, 3), (7, 3), (30, 4), (5, 8), (12, 6)):
        counts = balanced_counts(count, d, rng)
        assert counts.sum() == count and set(counts.tolist()) <= {count // d, -(-count // d)}, (count, d, counts)
    extra = np.array([balanced_counts(7, 4, rng) for _ in range(4000)]) - 1  # 3 of 4 values get one more
    assert np.all(np.abs(extra.mean(axis=0) - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 4000))
    spec = CollectionSpec([Feature("f", ["a", "b", "c"])], ["y", "n"], "DE", 50.0)
    states = composed_states(spec, 600, rng)
    assert sum(s.n for s in states) == 600
    # At ε 50 a DE report is its value: the feature's six values each about a sixth of its dummies.
    support = np.asarray(states[1].support)
    assert support.max() - support.min() <= 1, support


def _uniform_views(spec: CollectionSpec, dummies: int) -> np.ndarray:
    """The flooded view per record with uniform dummies, over every way ``dummies + 1`` reports fall
    on the (input, output) cells: the person's report on one cell, the dummies multinomial."""
    sizes = [o.state_size for o in spec.oracles]
    cells = sum(sizes)
    grid = np.array(np.meshgrid(*[np.arange(dummies + 2)] * cells, indexing="ij")).reshape(cells, -1).T
    grid = grid[grid.sum(axis=1) == dummies + 1]
    dummy = np.concatenate([share * mean for share, mean in dummy_expectation(spec)])
    out = []
    for a in range(2):
        for c in range(spec.n_classes):
            person = np.concatenate(
                [np.where(np.arange(s) == (c if i == 0 else a * spec.n_classes + c), o.p, o.q) / spec.n_inputs
                 for i, (o, s) in enumerate(zip(spec.oracles, sizes))]
            )  # fmt: skip
            law = np.zeros(len(grid))
            for cell in range(cells):
                rest = grid.copy()
                rest[:, cell] -= 1
                ok = rest[:, cell] >= 0
                law[ok] += person[cell] * multinomial.pmf(rest[ok], dummies, dummy)
            out.append(law)
    return np.array(out)


def test_the_exact_flooded_view_matches_a_multinomial_computation_for_uniform_dummies():
    spec = CollectionSpec([Feature("f", ["a", "b"])], ["y", "n"], "DE", 1.0)
    dummies, delta = 8, 1e-3
    views = flooded_views(spec, dummies, uniform=True)
    expected = _uniform_views(spec, dummies)
    for epsilon in (flooded_epsilon(1.0, dummies, delta), 0.3, 0.6):
        assert hockey_stick(views, epsilon) == pytest.approx(hockey_stick(expected, epsilon), rel=1e-9)
    composed = flooded_views(spec, dummies, uniform=False)
    assert np.allclose(composed.sum(axis=1), 1.0)
    assert hockey_stick(composed, 0.3) != pytest.approx(hockey_stick(views, 0.3), rel=1e-6)
