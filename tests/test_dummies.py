"""The shuffler's dummy reports (participant/dummies.py): drawn as a device draws, and taken out of
the statistics in expectation so that every estimate stays unbiased for the people's reports,
with the variance they add said as it is.

Over 200 seeded collections of fixed people and 300 dummies drawn report by report with the
device's code, every oracle's and mean mechanism's estimates lie within the noise of the truth
(with and without dummies); left in, the dummies bias them far outside it; and the variance the
statistics state for a count, the people's noise plus what :func:`dummy_variance` says the
dummies add, is the variance seen across the collections; at ε 5, where the values' spread is
most of it, batches of dummies alone spread every count and mean input by the stated variance."""

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


def compositions(total: int, parts: int) -> np.ndarray:
    """Every way of writing ``total`` as ``parts`` non-negative counts, one per row."""
    if parts == 1:
        return np.array([[total]])
    rows = [np.column_stack([np.full(len(rest), first), rest])
            for first in range(total + 1) for rest in [compositions(total - first, parts - 1)]]  # fmt: skip
    return np.vstack(rows)


def test_against_an_aggregator_that_wrote_every_other_report_the_dummies_alone_keep_the_stated_epsilon():
    """The flooded guarantee, exactly: an aggregator that wrote every other report of a batch sees
    (beyond its own) how many of the person's report and the M dummies fall on each output. For a
    small spec its distribution under every two records is computed outright, the dummies' from
    what the shuffler draws (:func:`dummy_expectation`), and their hockey-stick divergence at the
    ε the accountant states for M + 1 reports is at most the δ it states. (The bound is loose at
    this size: an accountant that counted three times the dummies would pass here, ten times not.)"""
    from scipy.stats import multinomial

    from protocols.shuffling import flooded_epsilon

    spec = CollectionSpec([Feature("f", ["a", "b"])], ["y", "n"], "DE", 1.0)
    dummies, delta = 30, 1e-3
    oracles = spec.oracles
    sizes = [o.state_size for o in oracles]
    cells = sum(sizes)
    # One dummy's chance of each (input, output): its input's share times what its output supports.
    dummy = np.concatenate([share * mean for share, mean in dummy_expectation(spec)])
    assert dummy.sum() == pytest.approx(1.0)
    views = compositions(dummies + 1, cells)
    # The dummies' law given the person's report on each cell, the same for every record.
    after_person = []
    for cell in range(cells):
        rest = views.copy()
        rest[:, cell] -= 1
        ok = rest[:, cell] >= 0
        after_person.append((ok, multinomial.pmf(rest[ok], dummies, dummy)))

    def view_law(record: tuple[int, int]) -> np.ndarray:
        c, a = record
        person = np.zeros(cells)
        offset = 0
        for i, (oracle, size) in enumerate(zip(oracles, sizes)):
            value = c if i == 0 else a * spec.n_classes + c
            out = np.full(size, oracle.q)
            out[value] = oracle.p
            person[offset : offset + size] = out / spec.n_inputs
            offset += size
        law = np.zeros(len(views))
        for cell, (ok, dummies_law) in enumerate(after_person):
            law[ok] += person[cell] * dummies_law
        return law

    records = [(c, a) for c in range(2) for a in range(2)]
    laws = {r: view_law(r) for r in records}
    assert all(law.sum() == pytest.approx(1.0) for law in laws.values())
    stated = flooded_epsilon(spec.epsilon, dummies, delta)
    assert stated < spec.epsilon * 0.75  # amplified: the check is not the trivial one
    worst = max(np.maximum(laws[x] - np.exp(stated) * laws[y], 0).sum() for x in records for y in records if x != y)
    assert worst <= delta, (stated, worst)
    # Without the dummies' blanket the same ε does not hold: the check can fail.
    alone = max(np.maximum(view_law_single(spec, x) - np.exp(stated) * view_law_single(spec, y), 0).sum()
                for x in records for y in records if x != y)  # fmt: skip
    assert alone > delta


def view_law_single(spec: CollectionSpec, record: tuple[int, int]) -> np.ndarray:
    """The law of one person's report alone over (input, output)."""
    c, a = record
    parts = []
    for i, oracle in enumerate(spec.oracles):
        value = c if i == 0 else a * spec.n_classes + c
        out = np.full(oracle.state_size, oracle.q)
        out[value] = oracle.p
        parts.append(out / spec.n_inputs)
    return np.concatenate(parts)


HIGH = {
    "DE": CollectionSpec(FEATURES, ["yes", "no"], "DE", 5.0),
    "OUE": CollectionSpec(FEATURES, ["yes", "no"], "OUE", 5.0),
    "SHE": CollectionSpec(FEATURES, ["yes", "no"], "SHE", 5.0),
    "gaussian-1": CollectionSpec([], ["yes", "no"], "DE", 5.0, continuous=RANGES, model="gaussian", approach=1),
    # Approach 3's Laplace noise at ε 10 is below the spread of the uniform coordinates it carries.
    "gaussian-3": CollectionSpec([], ["yes", "no"], "DE", 10.0, continuous=RANGES, model="gaussian", approach=3),
}


@pytest.mark.parametrize("name", list(HIGH))
@pytest.mark.parametrize("bulk", [False, True])
def test_the_dummies_spread_is_the_stated_variance_at_a_high_epsilon(name, bulk):
    """At ε 5 (10 for approach 3's means), where the spread of the dummies' uniform values is
    most of what they add, ``M`` dummies (report by report as a shuffler draws them, and in bulk
    as the simulator does) spread every frequency-oracle input's count estimates and every mean
    input's summed support across 300 seeded batches by what :func:`dummy_variance` states, and
    their mean is the expectation the aggregator takes out."""
    spec = HIGH[name]
    rng = np.random.default_rng(21)
    reps, m = 300, 240
    found = []
    for _ in range(reps):
        if bulk:
            states = dummy_states(spec, m, rng)
        else:
            drawn = draw_dummies(spec, m, rng)
            states = []
            for i, oracle in enumerate(spec.oracles):
                payloads = [r.payload for r in drawn if r.input == i]
                states.append(
                    oracle.aggregate(np.stack(payloads) if payloads and np.ndim(payloads[0]) else np.array(payloads))
                    if payloads else OracleState.empty(oracle.state_size)
                )  # fmt: skip
        row = []
        for i, (oracle, state) in enumerate(zip(spec.oracles, states)):
            frequency = spec.model != "gaussian" or i == 0
            row.append(np.asarray(oracle.estimate(state) if frequency else state.support, dtype=float))
        found.append(row)
    stated = dummy_variance(spec, m)
    for i, (oracle, (share, mean)) in enumerate(zip(spec.oracles, dummy_expectation(spec))):
        seen = np.array([row[i] for row in found])
        frequency = spec.model != "gaussian" or i == 0
        expected = m * share * (mean - oracle.q) / (oracle.p - oracle.q) if frequency and hasattr(oracle, "q") else (
            m * share / oracle.state_size if frequency else m * share * mean)  # fmt: skip
        se = np.sqrt(stated[i] / reps)
        assert np.all(np.abs(seen.mean(axis=0) - expected) < 5 * se), (i, seen.mean(axis=0), expected)
        ratio = seen.var(axis=0, ddof=1).mean() / np.mean(stated[i])
        assert 0.8 < ratio < 1.25, (name, i, ratio)
