"""Issue 80: "with about N people it would" is a promise, said only when a confirmation at N on
fresh collections (seeds the search did not use) passes; a tie is never one; and the rule's
levels are the ones its derivation (``sim/verdict.py``) gives, checked here by simulation."""

import numpy as np
import pytest

import sim.verdict as verdict_module
from sim.datasets import Dataset
from sim.verdict import (
    CHECK_REPS,
    CONFIRM_REPS,
    PEOPLE_FACTORS,
    PEOPLE_REPS,
    PROMISE_FAILURE,
    critical_t,
    passes,
    people_needed,
    promise_effect,
)

SAMPLE = Dataset("tiny", np.array([["x"]] * 10, dtype=object), np.array(["a", "b"] * 5, dtype=object), ("f",), "class")
TRAIN = 8  # people in SAMPLE's training split: the sizes tried are 32, 128, 512, 2048


def nine_ties_and_a_row(runs: int = PEOPLE_REPS) -> np.ndarray:
    """The shuffled-labels file an outside check was promised 'about 195,993 people' for: nine
    gains of 0 and one of a single test row."""
    gains = np.zeros(runs)
    gains[-1] = 1 / 1382
    return gains


def gains_with(t: float, runs: int, scale: float = 0.01) -> np.ndarray:
    """``runs`` paired gains whose mean is exactly ``t`` standard errors."""
    z = np.random.default_rng(runs).normal(size=runs)
    z = (z - z.mean()) / z.std(ddof=1)
    return scale * (z + t / np.sqrt(runs))


def scripted(monkeypatch, search: dict, confirm: dict, calls: list):
    """Replace the simulated collections: gains by size (people) for the search's seeds and for
    the confirmation's; every call recorded as (people, seeds)."""

    def fake(data, people, protocol, epsilon, estimator, setup, seeds):
        seeds = list(seeds)
        calls.append((people, seeds))
        table = search if seeds[0] < PEOPLE_REPS else confirm
        return table.get(people, np.zeros(len(seeds)))

    monkeypatch.setattr(verdict_module, "grown_gains", fake)


def test_a_tie_is_never_a_promise(monkeypatch):
    """Nine zero gains and one tiny one, at every size and in every confirmation: the mean equals
    its standard error, which the old rule (gain > SE) passed through float rounding; now neither
    the search nor the confirmation passes, and no number of people is named."""
    gains = nine_ties_and_a_row()
    mean, se = gains.mean(), gains.std(ddof=1) / np.sqrt(len(gains))
    assert mean == pytest.approx(se, rel=1e-12) and mean > se  # the old rule's promise, by rounding
    calls = []
    sizes = {TRAIN * f: gains for f in PEOPLE_FACTORS}
    scripted(monkeypatch, sizes, {p: nine_ties_and_a_row(CONFIRM_REPS) for p in sizes}, calls)
    assert people_needed(SAMPLE, "DE", 1.0, "normsub") is None
    # Even at the old rule's bound (one SE), a gain equal to its bound is a tie, not a pass.
    monkeypatch.setattr(verdict_module, "critical_t", lambda runs, level, effect=0.0: 1.0)
    assert not passes(gains, 0.05)
    for tie in (np.zeros(10), np.full(10, 0.01), -gains, np.r_[gains[:-1], np.nan], gains[:1]):
        assert not passes(tie, 0.5), tie  # no gain, a zero SE, a loss, a lost run, a single run


def test_a_promise_is_made_only_where_its_fresh_confirmation_passes(monkeypatch):
    """The search passes at 4x (t = 4 over 10 runs) but 20 fresh collections there show t = 4,
    below the confirmation's 5.73: no promise at 4x. At 16x both pass (t = 4, then 8): the
    promise is 16x, and its confirmation ran on seeds the search never used."""
    calls = []
    search = {TRAIN * 4: gains_with(4.0, PEOPLE_REPS), TRAIN * 16: gains_with(4.0, PEOPLE_REPS)}
    confirm = {TRAIN * 4: gains_with(4.0, CONFIRM_REPS), TRAIN * 16: gains_with(8.0, CONFIRM_REPS)}
    scripted(monkeypatch, search, confirm, calls)
    assert people_needed(SAMPLE, "DE", 1.0, "normsub", seed=0) == TRAIN * 16
    assert [p for p, _ in calls] == [TRAIN * 4, TRAIN * 4, TRAIN * 16, TRAIN * 16]
    searched = {s for _, seeds in calls[::2] for s in seeds}
    confirmed = {s for _, seeds in calls[1::2] for s in seeds}
    assert searched == set(range(PEOPLE_REPS)) and len(confirmed) == CONFIRM_REPS and not searched & confirmed
    # A confirmation that never passes: no promise at any size, though the search passes at each.
    calls.clear()
    scripted(monkeypatch, {TRAIN * f: gains_with(6.0, PEOPLE_REPS) for f in PEOPLE_FACTORS}, {}, calls)
    assert people_needed(SAMPLE, "DE", 1.0, "normsub") is None
    assert len(calls) == 2 * len(PEOPLE_FACTORS)  # the cost bound: every size searched and confirmed once


def test_the_confirmation_keeps_failed_promises_under_five_percent_by_simulation():
    """The derivation, checked by drawing normal paired gains. At δ* a check of 20 fresh
    collections (gain > one SE) fails 5 % of the time; a confirmation (20 runs) passes there at
    most 1.25 % (5 % over four sizes); and where it passes half the time, the check fails far less
    than 5 %. The search's bound is Student's t at 5 % over four sizes."""
    rng = np.random.default_rng(80)
    d_star = promise_effect()
    assert 0.55 < d_star < 0.65
    assert critical_t(PEOPLE_REPS, 0.05 / 4) == pytest.approx(2.685, abs=1e-3)

    def t_stats(delta: float, runs: int, draws: int = 40_000) -> np.ndarray:
        x = rng.normal(delta, 1.0, size=(draws, runs))
        return x.mean(1) / (x.std(1, ddof=1) / np.sqrt(runs))

    assert np.mean(t_stats(d_star, CHECK_REPS) <= 1.0) == pytest.approx(PROMISE_FAILURE, abs=0.005)
    bound = critical_t(CONFIRM_REPS, 0.05 / 4, d_star)
    assert np.mean(t_stats(d_star, CONFIRM_REPS) > bound) < 0.0125 + 0.003
    halfway = bound / np.sqrt(CONFIRM_REPS)  # the confirmation passes about half the time here
    assert 0.4 < np.mean(t_stats(halfway, CONFIRM_REPS) > bound) < 0.6
    assert np.mean(t_stats(halfway, CHECK_REPS) <= 1.0) < 0.001


def test_a_verdict_whose_gain_equals_its_error_is_no_verdict_however_it_rounds():
    """Nine repetitions that tie the constant and one a single test row better: the mean gain
    equals its standard error exactly, which float sums may round either way; a tie learned nothing."""
    from sim.verdict import verdict

    majority = [0.7] * 10
    for row in (1 / 100, 1 / 300, 1 / 1382, 1 / 7):
        accuracy = [0.7] * 9 + [0.7 + row]
        found = verdict(accuracy, majority, 100)
        assert abs(found.gain - found.se) <= 1e-12 and not found.learned, found
    assert verdict([0.8] * 9 + [0.81], [0.7] * 10, 100).learned
