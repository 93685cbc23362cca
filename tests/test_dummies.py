"""The shuffler's dummy reports (participant/dummies.py): drawn as a device draws, and taken out of
the statistics in expectation so that every estimate stays unbiased for the people's reports,
with the variance they add said as it is.

Over 200 seeded collections of fixed people and 300 dummies drawn report by report with the
device's code, every oracle's and mean mechanism's estimates lie within the noise of the truth
(with and without dummies); left in, the dummies bias them far outside it; and the variance the
statistics state for a count, the people's noise plus what :func:`dummy_variance` says the
dummies add, is the variance seen across the collections."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from aggregator.estimation.statistics import CollectionStatistics
from participant import CollectionSpec, Feature
from participant.dummies import draw_dummies, dummy_expectation, dummy_states, dummy_variance
from participant.encoding import population_inputs
from participant.reporting import choose_inputs
from protocols import OracleState

REPS, DUMMIES, PEOPLE = 200, 300, 400
FEATURES = [Feature("colour", ["red", "blue", "green"]), Feature("size", ["S", "L"])]
RANGES = {"inputs": [{"name": "x", "low": 0.0, "high": 10.0}, {"name": "z", "low": -1.0, "high": 1.0}]}
SPECS = {
    "DE": CollectionSpec(FEATURES, ["yes", "no"], "DE", 1.0),
    "SUE": CollectionSpec(FEATURES, ["yes", "no"], "SUE", 1.0),
    "OUE": CollectionSpec(FEATURES, ["yes", "no"], "OUE", 2.0, class_share=0.5),
    "SHE": CollectionSpec(FEATURES, ["yes", "no"], "SHE", 2.0),
    "THE": CollectionSpec(FEATURES, ["yes", "no"], "THE", 2.0),
    "gaussian-1": CollectionSpec([], ["yes", "no"], "DE", 2.0, continuous=RANGES, model="gaussian", approach=1),
    "gaussian-2": CollectionSpec([], ["yes", "no"], "DE", 2.0, continuous=RANGES, model="gaussian", approach=2),
    "gaussian-3": CollectionSpec([], ["yes", "no"], "DE", 2.0, continuous=RANGES, model="gaussian", approach=3),
}


def people(spec: CollectionSpec, rng) -> tuple[list[np.ndarray], np.ndarray]:
    """A fixed population's values per input and each person's chosen input."""
    y = rng.choice(["yes", "no"], size=PEOPLE, p=[0.7, 0.3])
    if spec.continuous is None:
        X = np.column_stack([rng.choice(f.categories, size=PEOPLE, p=None) for f in FEATURES])
    else:
        X = np.column_stack([rng.uniform(0, 10, PEOPLE) ** 1.0, rng.uniform(-1, 1, PEOPLE) ** 3])
    inputs = population_inputs(spec, X, y)
    return inputs, choose_inputs(spec, PEOPLE, rng)


def collection(spec, inputs, chosen, rng, dummies: int) -> CollectionStatistics:
    """The people's reports, then ``dummies`` dummy reports drawn one by one as a shuffler draws them."""
    stats = CollectionStatistics(spec)
    stats.states = [o.simulate(inputs[i][chosen == i], rng) for i, o in enumerate(spec.oracles)]
    drawn = draw_dummies(spec, dummies, rng)
    for i, oracle in enumerate(spec.oracles):
        payloads = [r.payload for r in drawn if r.input == i]
        if payloads:
            stats.states[i] += oracle.aggregate(np.stack(payloads) if np.ndim(payloads[0]) else np.array(payloads))
    stats.dummies = float(dummies)
    return stats


def estimates(stats: CollectionStatistics) -> list[np.ndarray]:
    return [np.asarray(e, dtype=float) for e in stats.estimated_counts()]


def truth(spec, inputs, chosen) -> list[np.ndarray]:
    """What each input's estimate estimates: its people's value counts (a frequency oracle) or mean value."""
    out = []
    for i, oracle in enumerate(spec.oracles):
        values = inputs[i][chosen == i]
        if spec.model == "gaussian" and i > 0:
            out.append(values.mean(axis=0))
        else:
            out.append(np.bincount(values, minlength=oracle.state_size).astype(float))
    return out


@pytest.mark.parametrize("name", list(SPECS))
def test_the_people_estimates_stay_unbiased_with_dummies_and_their_variance_is_stated(name):
    spec = SPECS[name]
    rng = np.random.default_rng(7)
    inputs, chosen = people(spec, rng)
    target = np.concatenate(truth(spec, inputs, chosen))
    for dummies in (0, DUMMIES):
        kept, raw = [], []
        for _ in range(REPS):
            stats = collection(spec, inputs, chosen, rng, dummies)
            kept.append(np.concatenate(estimates(stats.people())))
            left_in = stats.copy()
            left_in.dummies = 0.0
            raw.append(np.concatenate(estimates(left_in)))
        kept = np.array(kept)
        z = (kept.mean(axis=0) - target) / (kept.std(axis=0, ddof=1) / np.sqrt(REPS))
        # Every cell within the noise, and all of them together (χ² of the z-scores).
        assert np.abs(z).max() < 4.5, (dummies, z.round(1))
        assert chi2.sf(float((z**2).sum()), len(z)) > 1e-4, (dummies, z.round(1))
        if dummies:
            raw = np.array(raw)
            left = (raw.mean(axis=0) - target) / (raw.std(axis=0, ddof=1) / np.sqrt(REPS))
            assert np.abs(left).max() > 8, "dummies left in should bias some estimate far outside the noise"
            # The count estimates' variance (every frequency-oracle input: the class input leads in
            # either model): the people's noise and what the dummies add, as stated.
            cells = 0
            for i, oracle in enumerate(spec.oracles[: 1 if spec.model == "gaussian" else None]):
                counts = truth(spec, inputs, chosen)[i]
                stated = oracle.variance(int(counts.sum()), counts) + dummy_variance(spec, dummies)[i]
                seen = kept[:, cells : cells + oracle.state_size].var(axis=0, ddof=1)
                assert 0.75 < seen.mean() / stated.mean() < 1.33, (i, seen.mean() / stated.mean())
                cells += oracle.state_size


def test_a_dummy_is_drawn_as_a_device_draws_and_its_expectation_is_its_mean():
    """The expectation the aggregator takes out is what dummies add, report by report and as the
    simulator draws them in bulk."""
    spec = SPECS["OUE"]
    rng = np.random.default_rng(3)
    n = 20_000
    drawn = draw_dummies(spec, n, rng)
    assert len(drawn) == n and len({r.report_id for r in drawn}) == n
    bulk = dummy_states(spec, n, rng)
    for i, (share, mean) in enumerate(dummy_expectation(spec)):
        rows = [r.payload for r in drawn if r.input == i]
        assert abs(len(rows) / n - share) < 4 * np.sqrt(share * (1 - share) / n)
        state = spec.oracles[i].aggregate(np.array(rows))
        for found in (state, bulk[i]):
            se = np.sqrt(found.n * mean * (1 - mean))
            assert np.all(np.abs(found.support - found.n * mean) < 5 * se + 1e-9)
    assert isinstance(bulk[0], OracleState)
