"""The shuffle accountant (protocols/shuffling.py) and what it drives: the published example, the
closed form as an upper bound, monotonicity, the inverse, a bound that holds where the truth is
computable, the command line, the simulator's --central-eps, and shuffled specs."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
from scipy import stats

from participant import CollectionSpec, SpecError
from protocols.shuffling import (
    closed_form_epsilon,
    default_delta,
    default_dummies,
    guarantees,
    largest_local_epsilon,
    local_epsilon_for,
    shuffled_delta,
    shuffled_epsilon,
)

from .conftest import table_1_spec
from .inprocess import run_main


def test_the_papers_published_example_falls_within_its_interval():
    """Feldman, McMillan and Talwar: n = 10^5, ε₀ = 4, δ = 10^-6 gives ε between 0.1675 and 0.1728
    numerically, 0.538 by the closed form."""
    assert 0.1675 <= shuffled_epsilon(4.0, 100_000, 1e-6) <= 0.1728
    assert closed_form_epsilon(4.0, 100_000, 1e-6) == pytest.approx(0.538, abs=5e-4)


def exact_divergence(epsilon: float, local: float, n: int) -> float:
    """Theorem 3.2's hockey-stick divergence of P from Q by enumerating every (c, a), in exact binomials."""
    clone, heads = math.exp(-local), math.exp(local) / (math.exp(local) + 1)
    total = 0.0
    for c in range(n):
        weight = math.comb(n - 1, c) * clone**c * (1 - clone) ** (n - 1 - c)
        half = [math.comb(c, a) / 2**c for a in range(c + 1)]
        for a in range(c + 2):
            b = lambda k: half[k] if 0 <= k <= c else 0.0  # noqa: E731
            p = (1 - heads) * b(a) + heads * b(a - 1)
            q = heads * b(a) + (1 - heads) * b(a - 1)
            total += weight * max(0.0, p - math.exp(epsilon) * q)
    return total


@pytest.mark.parametrize("n, local, epsilon", [(12, 1.0, 0.4), (30, 2.0, 1.0), (60, 0.5, 0.2), (40, 3.0, 1.5)])
def test_the_divergence_is_the_theorems_computed_by_enumeration(n, local, epsilon):
    assert shuffled_delta(epsilon, local, n, 1e-9) == pytest.approx(exact_divergence(epsilon, local, n), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("local, n, delta", [(1.0, 10**6, 1e-8), (4.0, 300_000, 1e-7), (0.3, 10**7, 1e-9), (2.0, 50_000, 1e-6)])
def test_summing_c_in_intervals_bounds_the_sum_over_every_c_within_one_percent(local, n, delta, monkeypatch):
    """The accountant sums C over at most 512 intervals, each bounded by its worse end: at least
    the bound over every value of C, and within 1 % of it."""
    from protocols import shuffling

    stepped = shuffled_epsilon(local, n, delta)
    monkeypatch.setattr(shuffling, "INTERVALS", 10**8)  # one interval per value of C
    shuffling._clones.cache_clear()
    shuffling.shuffled_epsilon.cache_clear()
    every = shuffling.shuffled_epsilon(local, n, delta)
    shuffling._clones.cache_clear()
    shuffling.shuffled_epsilon.cache_clear()
    assert every * (1 - 1e-5) <= stepped <= every * 1.01, (stepped, every)


def randomised_response_delta(epsilon: float, local: float, n: int) -> float:
    """The exact δ of the count of ones among n shuffled randomised-response bits (ε₀ each), the
    first person's bit 0 against 1, the others' 0: shuffled bits reveal only their count."""
    keep = math.exp(local) / (math.exp(local) + 1)
    others = stats.binom.pmf(np.arange(n), n - 1, 1 - keep)  # the others' ones
    count0 = np.append(others * keep, 0) + np.append(0, others * (1 - keep))  # the first bit 0: a one w.p. 1 − keep
    count1 = np.append(others * (1 - keep), 0) + np.append(0, others * keep)
    return max(float(np.maximum(count0 - math.exp(epsilon) * count1, 0).sum()),
               float(np.maximum(count1 - math.exp(epsilon) * count0, 0).sum()))  # fmt: skip


@pytest.mark.parametrize("local, n", [(1.0, 1000), (3.0, 5000), (6.0, 20_000)])
def test_the_bound_holds_on_randomised_response_whose_truth_is_computable(local, n):
    delta = 1e-6
    epsilon = shuffled_epsilon(local, n, delta)
    assert randomised_response_delta(epsilon, local, n) <= delta
    assert epsilon < local


def test_the_closed_form_is_an_upper_bound_wherever_it_applies():
    checked = 0
    for n in (10**4, 10**5, 10**6, 10**7):
        for local in (0.1, 0.5, 1.0, 2.0, 4.0, 6.0):
            for delta in (1e-5, 1e-8):
                closed = closed_form_epsilon(local, n, delta)
                if closed is not None:
                    checked += 1
                    assert shuffled_epsilon(local, n, delta) <= closed
    assert checked >= 30


def test_the_central_epsilon_shrinks_with_people_and_grows_with_the_local_epsilon():
    people = [100, 1000, 10**4, 10**5, 10**6]
    by_people = [shuffled_epsilon(2.0, n, 1e-7) for n in people]
    assert all(a > b for a, b in zip(by_people, by_people[1:])), by_people
    locals_ = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
    by_local = [shuffled_epsilon(e, 10**5, 1e-7) for e in locals_]
    assert all(a < b for a, b in zip(by_local, by_local[1:])), by_local
    assert all(c <= e for c, e in zip(by_local, locals_))  # shuffling never costs privacy
    assert shuffled_epsilon(3.0, 1, 1e-6) == pytest.approx(3.0, rel=1e-4)  # alone in a batch: nothing to hide among


@pytest.mark.parametrize(
    "central, n, delta",
    [(0.5, 1382, 7.2e-5), (0.1, 10**5, 1e-6), (1.0, 10**6, 1e-7), (0.05, 10**7, 1e-9), (4.0, 1382, 1e-6), (2.0, 5000, 1e-4)],
)
def test_the_inverse_gives_the_largest_local_epsilon_within_the_target(central, n, delta):
    local = largest_local_epsilon(central, n, delta)
    assert shuffled_epsilon(local, n, delta) <= central  # as stated, never over the target (issue 68)
    assert shuffled_epsilon(local * 1.01, n, delta) > central  # one percent more is over
    assert largest_local_epsilon(shuffled_epsilon(3.0, n, delta), n, delta) == pytest.approx(3.0, rel=1e-3)


def test_a_call_sums_a_bounded_number_of_terms_up_to_ten_million_people(monkeypatch):
    """C's law is summed over at most INTERVALS + 1 interval ends whatever the number of people, so
    a call's work does not grow with them: counted (binomial tails evaluated), not timed against a
    clock a loaded machine can break. Each divergence evaluates two tails per end, and a call
    bisects at most four times over _STEPS steps (summed exactly, 10^7 people took ~4 million)."""
    from protocols import shuffling

    evaluated = [0]
    tails = shuffling._at_least

    def counted(k, c):
        evaluated[0] += len(c)
        return tails(k, c)

    monkeypatch.setattr(shuffling, "_at_least", counted)
    for local, n, delta in [(1.0, 10**7, 1e-8), (5.0, 9_999_991, 1e-7)]:
        for cached in (shuffling._clones, shuffled_epsilon, largest_local_epsilon):
            cached.cache_clear()
        evaluated[0] = 0
        central = shuffled_epsilon(local, n, delta)
        largest_local_epsilon(central * 1.5, n, delta)
        assert 0 < evaluated[0] <= 2 * (shuffling.INTERVALS + 1) * 4 * shuffling._STEPS, (n, evaluated[0])


def aggregator(capsys, *args: str) -> subprocess.CompletedProcess:
    """``python -m aggregator ARGS``, through its main() in this process."""
    from aggregator.operator.cli import main

    return run_main(main, capsys, *args)


def test_the_command_line_prints_the_central_epsilon_or_the_largest_local_one(capsys):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return aggregator(capsys, "privacy", *args)

    answer = json.loads(cli("--local-eps", "4", "--people", "100000", "--delta", "1e-6", "--json").stdout)
    assert set(answer) == {
        "local_epsilon", "people", "dummies", "delta", "central_epsilon", "flooded_epsilon", "amplified",
        "flooded_amplified", "closed_form",
    }  # fmt: skip
    assert 0.1675 <= answer["central_epsilon"] <= 0.1728 and answer["closed_form"] == pytest.approx(0.538, abs=5e-4)
    inverse = json.loads(cli("--central-eps", "0.5", "--people", "1382", "--json").stdout)
    assert inverse["delta"] == default_delta(1382) and inverse["central_epsilon"] <= 0.5 + 1e-6
    assert inverse["local_epsilon"] == pytest.approx(largest_local_epsilon(0.5, 1382, default_delta(1382)))
    text = cli("--local-eps", "2", "--people", "1382", "--delta", "1e-6").stdout
    assert "(0.4547, 1e-06)-DP against the aggregator alone" in text
    for bad in (["--local-eps", "4"], ["--local-eps", "4", "--central-eps", "1", "--people", "9"], ["--local-eps", "-1", "--people", "9"]):
        refused = cli(*bad)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_the_simulator_reports_at_the_local_epsilon_the_central_one_allows(capsys):
    from sim.cli import main

    def sim(*args: str) -> dict:
        result = run_main(main, capsys, *args, "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout)

    out = sim("--dataset", "car", "--protocol", "OUE", "--central-eps", "0.5", "--reps", "2", "--mode", "fast")
    people = out["n_train"]
    dummies = default_dummies(people)
    assert people == 1382 and out["delta"] == default_delta(people) and out["dummies"] == dummies
    assert out["eps"] == out["local_epsilon"] == pytest.approx(largest_local_epsilon(0.5, people + dummies, out["delta"]))
    assert out["central_epsilon"] == pytest.approx(0.5, abs=1e-5)
    assert out["flooded_epsilon"] == pytest.approx(shuffled_epsilon(out["local_epsilon"], dummies + 1, out["delta"]))
    both = sim("--dataset", "car", "--protocol", "OUE", "--central-eps", "0.5", "--flooded-eps", "0.5", "--dummies", "500",
               "--reps", "2", "--mode", "fast")  # fmt: skip
    assert both["local_epsilon"] == pytest.approx(largest_local_epsilon(0.5, 501, both["delta"])) and both["flooded_epsilon"] <= 0.5 + 1e-5
    plan = sim("plan", "--dataset", "car", "--central-eps", "1", "--delta", "1e-6", "--people", "5000", "--reps", "2", "--shares", "0.4")
    assert plan["eps"] == plan["local_epsilon"] == pytest.approx(largest_local_epsilon(1.0, 5000 + default_dummies(5000), 1e-6))


def test_a_shuffled_spec_states_both_guarantees_and_its_block_is_part_of_its_identity():
    block = {"min_batch": 1000, "delta": 1e-6}
    spec = table_1_spec(protocol="OUE", epsilon=4.0, shuffle=block)
    assert CollectionSpec.from_json(spec.to_json()) == spec and spec.to_dict()["shuffle"] == block
    direct = table_1_spec(protocol="OUE", epsilon=4.0)
    assert spec.fingerprint != direct.fingerprint and spec.question != direct.question
    other = table_1_spec(protocol="OUE", epsilon=4.0, shuffle={"min_batch": 999, "delta": 1e-6})
    assert other.fingerprint != spec.fingerprint
    central = shuffled_epsilon(4.0, 1000, 1e-6)
    statement = spec.privacy_statement(central, 4.0)
    assert "epsilon=4-LDP per person for the whole record" in statement and "the shuffler together" in statement
    assert f"(epsilon={central:.3g}, delta=1e-06)-DP" in statement and "at least 999 other people's reports" in statement
    assert "no amplification (epsilon=4) when the aggregator sends the shuffler every other report" in statement
    blanket = table_1_spec(protocol="OUE", epsilon=4.0, shuffle={**block, "dummies": 3000})
    found = guarantees(4.0, 1000, 3000, 1e-6)
    assert found["people"] == shuffled_epsilon(4.0, 4000, 1e-6) and found["flooded"] == shuffled_epsilon(4.0, 3001, 1e-6)
    statement = blanket.privacy_statement(found["people"], found["flooded"])
    assert f"(epsilon={found['flooded']:.3g}, delta=1e-06)-DP whatever the aggregator sends the shuffler" in statement
    assert "the shuffler's 3000 dummies alone" in statement and blanket.fingerprint != spec.fingerprint
    for bad, why in [({"min_batch": 1, "delta": 1e-6}, "min_batch"), ({"min_batch": 10, "delta": 1.5}, "delta"),
                     ({"min_batch": 10, "delta": 0.1}, "below 1/min_batch"), ({"min_batch": 10, "delta": 0.01, "dummies": -1}, "dummies"),
                     ({"min_batch": 10}, "needs min_batch"), ({"min_batch": 10, "delta": 0.01, "x": 1}, "unknown"),
                     ({"min_batch": 10, "delta": 0.01, "url": "ftp://x"}, "url"),
                     ({"min_batch": 10, "delta": 0.01, "key": {"id": 1, "kem": 16, "kdf": 1, "aead": 1, "public_key": "00" * 32}}, "suite")]:  # fmt: skip
        with pytest.raises(SpecError, match=why):
            table_1_spec(shuffle=bad)
    with pytest.raises(SpecError, match="one report per person"):
        table_1_spec(shuffle=block, budget="split")
    with pytest.raises(SpecError, match="choose their input at random"):
        table_1_spec(shuffle=block, input_selection="assigned")


def test_drafting_a_shuffled_spec_from_a_central_epsilon(tmp_path, capsys):
    sample = tmp_path / "sample.csv"
    sample.write_text("colour,size,class\n" + "".join(f"{c},{s},{k}\n" for c in ("red", "blue") for s in ("S", "L") for k in ("a", "b")))
    out = tmp_path / "spec.json"
    result = aggregator(capsys, "spec", "--csv", str(sample), "--label", "class", "--central-eps", "0.5",
                        "--people", "10000", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    spec = CollectionSpec.from_json(out.read_text())
    dummies = default_dummies(10000)
    assert spec.shuffle.min_batch == 10000 and spec.shuffle.delta == default_delta(10000) and spec.shuffle.dummies == dummies
    assert spec.epsilon == pytest.approx(largest_local_epsilon(0.5, 10000 + dummies, default_delta(10000)))
    assert "Against the aggregator alone" in result.stderr and "whatever the aggregator sends the shuffler" in result.stderr
    # Batches of K smaller than the N people expected: the local ε follows from K (and its dummies),
    # and a worst case stated for a flooding aggregator bounds it too.
    result = aggregator(capsys, "spec", "--csv", str(sample), "--label", "class", "--central-eps", "1",
                        "--people", "100000", "--min-batch", "500", "--dummies", "2000", "--flooded-eps", "1",
                        "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    spec = CollectionSpec.from_json(out.read_text())
    assert (spec.shuffle.min_batch, spec.shuffle.dummies, spec.shuffle.delta) == (500, 2000, default_delta(500))
    assert spec.epsilon == pytest.approx(local_epsilon_for(1.0, 500, 2000, default_delta(500), 1.0))
    assert spec.epsilon < largest_local_epsilon(1.0, 2500, default_delta(500))  # the flooded case binds
    assert guarantees(spec.epsilon, 500, 2000, default_delta(500))["flooded"] <= 1.0 + 1e-4
    refused = aggregator(capsys, "spec", "--csv", str(sample), "--label", "class", "--central-eps", "0.5")
    assert refused.returncode == 2 and "--people" in refused.stderr


def test_privacy_says_when_nothing_is_amplified_and_speaks_of_one_person(capsys):
    def privacy(*args: str) -> subprocess.CompletedProcess:
        return aggregator(capsys, "privacy", *args)

    one = privacy("--local-eps", "0.85", "--people", "1")
    assert one.returncode == 0 and one.stdout.startswith("1 person,") and "1 people" not in one.stdout
    assert "no amplification (one report is not shuffled with any other): epsilon 0.85" in one.stdout
    high = privacy("--local-eps", "30", "--people", "1000", "--dummies", "100", "--json")
    found = json.loads(high.stdout)
    assert found["central_epsilon"] == found["flooded_epsilon"] == 30 and not found["amplified"] and not found["flooded_amplified"]
    text = privacy("--local-eps", "30", "--people", "1000", "--dummies", "100").stdout
    assert text.count("no amplification") == 2
    worst = json.loads(privacy("--local-eps", "3.43", "--people", "1382", "--dummies", "1000", "--json").stdout)
    assert worst["flooded_epsilon"] == pytest.approx(shuffled_epsilon(3.43, 1001, default_delta(1382)))
    refused = privacy("--local-eps", "1", "--people", "10", "--delta", "0.1")
    assert refused.returncode == 2 and "below 1/N" in refused.stderr and refused.stderr.count("\n") == 1


@pytest.mark.parametrize("n, local, epsilon", [(30, 2.0, 1.0), (40, 3.0, 1.5)])
def test_the_mass_of_c_left_out_is_added_to_delta(n, local, epsilon, monkeypatch):
    """With most of C's mass left out of the sum (a window of it only), the δ the accountant
    states still bounds the exact divergence: what it leaves out it adds."""
    from protocols import shuffling

    exact = exact_divergence(epsilon, local, n)
    shuffling._clones.cache_clear()
    monkeypatch.setattr(shuffling, "TAIL", 2e3)  # leaves out a fifth of C's mass at δ = 1e-4
    try:
        _, _, left_out = shuffling._clones(local, n, 1e-4)
        assert left_out > 0.01
        assert shuffled_delta(epsilon, local, n, 1e-4) >= exact
    finally:
        shuffling._clones.cache_clear()


def test_the_http_api_refuses_a_delta_that_says_nothing(tmp_path):
    from .servers import AUTH, Server, token_file
    from .test_shuffler import SPEC, call

    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "a.sqlite3").start()
    try:
        import urllib.error

        body = {"spec": SPEC.to_dict(), "id": "c", "shuffler": {"url": "http://127.0.0.1:9", "token": token, "min_batch": 100, "delta": 0.9}}
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(f"{server.url}/collections", "POST", body, AUTH)
        assert refused.value.code == 400 and "below 1/min_batch" in json.load(refused.value)["error"]
    finally:
        server.stop()


def test_a_spec_drafted_for_batches_smaller_than_the_people_takes_its_local_epsilon_from_the_batch(tmp_path, capsys):
    """Without --flooded-eps (whose bound would decide): batches of 500 people and 2,000 dummies,
    100,000 people expected. The local ε is the largest whose batch of 2,500 reports is within the
    central ε, not that of 102,000 reports shuffled together; the stated guarantee holds it."""
    sample = tmp_path / "sample.csv"
    sample.write_text("colour,size,class\n" + "".join(f"{c},{s},{k}\n" for c in ("red", "blue") for s in ("S", "L") for k in ("a", "b")))
    out = tmp_path / "spec.json"
    result = aggregator(capsys, "spec", "--csv", str(sample), "--label", "class", "--central-eps", "1",
                        "--people", "100000", "--min-batch", "500", "--dummies", "2000", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    spec = CollectionSpec.from_json(out.read_text())
    delta = default_delta(500)
    assert (spec.shuffle.min_batch, spec.shuffle.dummies, spec.shuffle.delta) == (500, 2000, delta)
    assert spec.epsilon == pytest.approx(largest_local_epsilon(1.0, 2500, delta))
    assert spec.epsilon < largest_local_epsilon(1.0, 102_000, delta) * 0.9  # what all the people together would allow
    assert guarantees(spec.epsilon, 500, 2000, delta)["people"] <= 1.0 + 1e-4
