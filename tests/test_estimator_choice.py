"""The ``auto`` estimator: the reports' halves, the held-out score, and what the rule picks."""

import aiohttp
import numpy as np
import pytest

from aggregator import CollectionStatistics, build_model
from aggregator.estimation import choice
from aggregator.estimation.choice import CANDIDATES, half_of, held_out, joint_log_probabilities, pick
from aggregator.estimation.estimators import estimator_choice as choose_estimator
from aggregator.service.app import create_app, open_store, start_site
from participant.spec import CollectionSpec, Feature
from participant.wire import pack_batch, pack_report
from protocols import OracleState

from .conftest import table_1_spec
from .test_service import ADMIN, AUTH, simulated_reports


def expected_statistics(spec: CollectionSpec, counts) -> CollectionStatistics:
    """Statistics whose every support is its expectation given the true ``counts`` per input (no
    randomiser noise drawn): the estimates are the counts exactly."""
    stats = CollectionStatistics(spec)
    for i, (oracle, c) in enumerate(zip(spec.oracles, counts)):
        c = np.asarray(c, dtype=float)
        stats.states[i] = OracleState(c.sum(), oracle.q * c.sum() + (oracle.p - oracle.q) * c)
    return stats


def skewed_signal(people: int, features: int = 120, d: int = 8, epsilon: float = 2.0) -> CollectionStatistics:
    """A small collection (``people`` per input) of many features each telling the two classes
    apart (class a's values fall like 8:4:2:1:…, class b's the reverse), every cell held: its
    reports estimate the people's counts exactly, so the unsmoothed paper estimator is the truth
    and every smoothing only moves away from it."""
    spec = CollectionSpec([Feature(f"f{j}", [f"v{i}" for i in range(d)]) for j in range(features)], ["a", "b"], "DE", epsilon)
    a = np.array([8, 4, 2] + [1] * (d - 3), dtype=float)
    a /= a.sum()
    prior = np.array([0.7, 0.3])
    joint = np.column_stack([a * prior[0], a[::-1] * prior[1]]).ravel() * people  # index v·k + c
    return expected_statistics(spec, [prior * people] + [joint] * features)


def test_half_of_splits_by_the_ids_alone():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 256, size=(10_000, 16), dtype=np.uint8)
    side = half_of(ids)
    assert set(np.unique(side)) == {0, 1}
    assert abs(side.mean() - 0.5) < 0.02  # 10,000 fair coins: 4 standard errors
    np.testing.assert_array_equal(half_of(ids.copy()), side)  # the same ids, the same halves
    # Every byte of an id counts: flipping the lowest bit of any one moves the report across.
    for byte in (0, 7, 15):
        flipped = ids.copy()
        flipped[:, byte] ^= 1
        assert (half_of(flipped) != side).all()


def test_the_score_is_the_held_out_mean_log_probability():
    """With the halves' estimates exact, the score difference is the difference of the two models'
    mean log-probability of the values the people hold (per input, per report)."""
    stats = skewed_signal(300, features=3)
    fitted = [joint_log_probabilities(build_model(stats, name, temperature=1.0)) for name in ("normsub", "paper")]
    gains, variances = held_out(fitted, stats)
    counts = stats.estimated_counts()
    by_hand = sum(float(c @ (p - n)) for c, n, p in zip(counts, *fitted)) / stats.n_reports
    assert gains[0] == 0 and variances[0] == 0
    assert gains[1] == pytest.approx(by_hand, rel=1e-12)
    assert gains[1] > 0 and variances[1] > 0


def test_the_rule_picks_paper_where_it_is_the_truth():
    stats = skewed_signal(300)
    found = choose_estimator((stats, stats))
    assert found.chosen == "paper"
    assert found.gains["paper"] > 2 * choice.Z * found.errors["paper"]  # a margin of twice the rule's own


def test_the_rule_keeps_the_default_where_paper_is_clearly_worse():
    """connect-4 at ε 1 (54,045 people): the paper estimator's unsmoothed, clipped counts score
    worse on held-out reports by many standard errors (seed 0 of the study's draws)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from problems import load_problem

    from sim.experiment import runner_for

    stats = runner_for(load_problem("connect-4")).statistics(("auto", 1.0, None, "one-report"), 0, "fast", halves=True)
    found = choose_estimator(stats.halves)
    assert found.chosen == "normsub"
    assert found.gains["paper"] < -3 * found.errors["paper"]


def test_identical_candidates_tie_to_the_default():
    """A candidate that builds the same model differs from the default by float rounding alone: no pick."""
    spec = CollectionSpec([Feature("f", ["x", "y", "z"])], ["a", "b"], "DE", 1.0)
    flat = expected_statistics(spec, [[500, 500], np.full(6, 1000 / 6)])
    assert choose_estimator((flat, flat), ("normsub", "normsub")).chosen == "normsub"
    assert pick(np.array([0.0, 1e-15]), np.array([0.0, 1e-18]), ("normsub", "paper"), 2.0) == "normsub"


def test_pick_takes_the_largest_gain_beyond_its_bound():
    names = ("normsub", "paper", "ibu")
    assert pick(np.array([0.0, 0.5, 0.3]), np.array([0.0, 0.1, 0.1]), names, 2.0) == "paper"
    assert pick(np.array([0.0, 0.5, 0.3]), np.array([0.0, 0.3, 0.1]), names, 2.0) == "ibu"  # paper within noise
    assert pick(np.array([0.0, 0.5, 0.3]), np.array([0.0, 0.3, 0.2]), names, 2.0) == "normsub"


def test_auto_needs_halves_and_builds_the_chosen_model():
    stats = skewed_signal(300)
    with pytest.raises(ValueError, match="halves"):
        build_model(stats, "auto")
    stats.halves = (stats, stats)
    model = build_model(stats, "auto", temperature=1.0)
    paper = build_model(stats, "paper", temperature=1.0)
    assert model.choice.chosen == "paper"
    np.testing.assert_array_equal(model.class_count, paper.class_count)
    # Adding reports forgets the halves: a choice from them would describe other reports.
    stats.add(0, np.array([0]))
    assert stats.halves is None


def test_the_simulator_scores_auto_on_the_same_reports():
    """``auto`` in a run draws the collection as two halves for every estimator named with it, so
    its accuracy is one of theirs on the same reports."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from problems import load_problem

    from sim.experiment import runner_for

    runner = runner_for(load_problem("car"))
    result = runner.run("auto", 2.0, 0, ("normsub", "paper", "ibu", "auto"), mode="fast")
    assert result.accuracy["auto"] in {result.accuracy[n] for n in CANDIDATES}


@pytest.fixture
async def served(database):
    store, _ = await open_store(database, ADMIN)
    runner, url = await start_site(await create_app(store))
    async with aiohttp.ClientSession() as session:
        yield url, session, store
    await runner.cleanup()
    await store.close()


async def test_the_service_chooses_from_the_stored_reports_halves(served):
    """``/model?estimator=auto`` chooses from the stored reports split by their ids: the halves the
    store reads are those ids' halves, a re-posted report changes nothing, and the answer names the
    estimator chosen and builds its model."""
    url, session, store = served
    spec = table_1_spec(protocol="OUE", epsilon=2.0)
    async with session.post(f"{url}/collections", json={"spec": spec.to_dict(), "id": "c1", "min_reports": 0}, headers=AUTH) as r:
        assert r.status == 201
    reports = simulated_reports(spec, reps=100, seed=3)
    headers = {"Content-Type": "application/msgpack"}

    async def post(body):
        async with session.post(f"{url}/collections/c1/reports", data=body, headers=headers) as r:
            return r.status, await r.json()

    for start in range(0, len(reports), 400):
        status, _ = await post(pack_batch(reports[start : start + 400], spec))
        assert status in (200, 201)
    assert await store.count_reports(await store.collection("c1")) == len(reports)
    collection = await store.collection("c1")
    halves = await store.statistics_halves(collection)
    # By hand: each report in the half its id's byte parity says.
    ids = np.frombuffer(b"".join(r.report_id for r in reports), dtype=np.uint8).reshape(len(reports), -1)
    side = half_of(ids)
    for h, half in enumerate(halves):
        mine = [r for r, s in zip(reports, side) if s == h]
        assert half.n_reports == len(mine)
        for i in range(spec.n_inputs):
            rows = [r.payload for r in mine if r.input == i]
            np.testing.assert_array_equal(half.states[i].support, np.sum(rows, axis=0) if rows else 0)
    async with session.get(f"{url}/collections/c1/model", params={"estimator": "auto"}) as r:
        assert r.status == 200
        first = await r.json()
    stats = await store.statistics(collection)
    stats.halves = halves
    assert first["choice"]["chosen"] == choose_estimator(halves).chosen
    assert first["class_count"] == pytest.approx(list(build_model(stats, "auto").class_count), rel=1e-12)
    # A re-post of a stored report (a retry) is stored once: the halves, and the choice, stay.
    assert await post(pack_report(reports[0], spec)) == (200, {"status": "duplicate"})
    again = await store.statistics_halves(collection)
    for a, b in zip(again, halves):
        assert a.n_reports == b.n_reports
        for sa, sb in zip(a.states, b.states):
            np.testing.assert_array_equal(sa.support, sb.support)


def test_the_verdict_judges_the_estimator_auto_picked():
    """The people-needed search scores ``auto`` by the model its rule picked in each collection:
    every gain over the constant is one of the candidates' on the same draws."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from problems import load_problem

    from sim.experiment import run_grown
    from sim.verdict import grown_gains

    sample = load_problem("zoo")
    gains = grown_gains(sample, 400, "auto", 1.0, "auto", None, range(3))
    for seed, gain in zip(range(3), gains):
        run = run_grown(sample, 400, "auto", 1.0, seed, (*CANDIDATES, "auto"))
        assert run.accuracy["auto"] - run.majority_accuracy == gain
        assert run.accuracy["auto"] in {run.accuracy[n] for n in CANDIDATES}


def test_auto_is_refused_for_a_gaussian_model_in_one_line(capsys):
    from sim.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--dataset", "diabetes", "--model", "gaussian", "--estimator", "auto"])
    assert stopped.value.code == 2
    assert "auto" in capsys.readouterr().err.strip().splitlines()[-1]


async def test_the_service_refuses_auto_for_a_gaussian_model(served):
    from .test_continuous import gaussian_spec

    url, session, _ = served
    spec = gaussian_spec()
    async with session.post(f"{url}/collections", json={"spec": spec.to_dict(), "id": "g1", "min_reports": 0}, headers=AUTH) as r:
        assert r.status == 201
    async with session.get(f"{url}/collections/g1/model", params={"estimator": "auto"}) as r:
        assert r.status == 400
        assert "auto" in (await r.json())["error"] and "gaussian" in (await r.json())["error"]
    async with session.get(f"{url}/collections/g1/model", params={"estimator": "normsub"}) as r:
        assert r.status == 200  # the same collection answers its own estimators
