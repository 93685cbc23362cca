"""A trial run through a shuffler from one machine (issue 81): the replay paces itself by the
``Retry-After`` of the shuffler's per-address limit and gets through; when it may not wait that
long, the refusal names the shuffler by URL and ``shuffler serve --per-address``."""

from __future__ import annotations

import gzip
import json
import urllib.request

import numpy as np
import pytest

import sim.http_replay
import sim.pacing
from participant.errors import SubmissionFailed
from sim.cli import main
from sim.pacing import Pacer, Refused

from .servers import AUTH, Server, ShufflerProcess, token_file


def create_shuffled(server: Server, cid: str, shuffler: str, token: str) -> None:
    spec = json.loads(open("sim/specs/car.json").read())
    block = {"url": shuffler, "token": token, "min_batch": 2, "dummies": 0}
    body = {"spec": spec, "id": cid, "min_reports": 1, "shuffler": block}
    headers = {**AUTH, "Content-Type": "application/json"}
    request = urllib.request.Request(f"{server.url}/collections", data=json.dumps(body).encode(), headers=headers)
    urllib.request.urlopen(request, timeout=10).close()


def test_a_replay_through_a_shuffler_paces_itself_by_retry_after_and_a_refusal_names_the_shuffler(
    tmp_path, capsys, monkeypatch
):
    # 200 of car's rows, 160 people in the training split, through a shuffler allowing 140 reports
    # a minute from one address: 140 pass the burst and the rest refill in about 9 s. The replay
    # must outrun the refill to be refused at all (a bucket refills while a loaded machine sends):
    # 160 reports take well under those 9 s, where car's 1,382 against 1,250 a minute had 6 s.
    rows = gzip.decompress(open("sim/data/car.data.gz", "rb").read()).decode().split()
    picked = np.random.default_rng(5).choice(len(rows), 200, replace=False)
    csv = tmp_path / "car.csv"
    csv.write_text("\n".join(["buying,maint,doors,persons,lug_boot,safety,class", *(rows[i] for i in picked)]) + "\n")
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(
        tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt",
        "--interval", "0.3", "--min-batch", "2", "--dummies", "0", "--per-address", "140",
    ).start()  # fmt: skip
    try:
        create_shuffled(server, "shuf-1", shuffler.url, token)
        create_shuffled(server, "shuf-2", shuffler.url, token)
        run = ["--csv", f"{csv}:class", "--via", "http", "--aggregator", server.url,
               "--clients", "32", "--json"]  # fmt: skip
        pacers: list[Pacer] = []

        class Kept(Pacer):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                pacers.append(self)

        monkeypatch.setattr(sim.http_replay, "Pacer", Kept)
        assert main([*run, "--collection", "shuf-1"]) == 0
        out, err = capsys.readouterr()
        # Paused as long as the shuffler asked, together (not a pause per refused report): the
        # pauses asked, not a clock, which a loaded machine stretches.
        assert json.loads(out)["sent"] == 160 and 0 < pacers[0].paused < 30, [(p.url, p.paused) for p in pacers]
        (note,) = [line for line in err.splitlines() if "pacing by its Retry-After" in line]
        assert f"the shuffler at {shuffler.url} refused a report" in note and "at most 140 a minute" in note
        assert "python -m shuffler serve --per-address 160" in note
        row = shuffler.status()["shuf-1"]  # every report arrived (one may wait for a batch of two)
        assert row["forwarded"] + row["waiting"] == 160

        # The address's allowance is spent: a replay that may pause half a second stops at once,
        # naming the shuffler (not the aggregator) and the option.
        monkeypatch.setattr(sim.pacing, "PATIENCE", 0.5)
        with pytest.raises(SystemExit) as stopped:
            main([*run, "--collection", "shuf-2"])
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert stopped.value.code == 2
        assert f"the shuffler at {shuffler.url} kept refusing this replay's reports" in last
        assert "python -m shuffler serve --per-address 160" in last and "cannot use the aggregator" not in last
    finally:
        shuffler.stop()
        server.stop()


def refusal(status: int, message: str, retry_after: float | None) -> SubmissionFailed:
    message = f"POST u failed after 1 attempts; last: {status} {message}"
    return SubmissionFailed(message, status=status, retry_after=retry_after)


async def test_the_replay_pauses_together_within_its_patience_and_names_the_party():
    now = [100.0]
    pacer = Pacer("http://agg.example", False, 500, patience=10.0, clock=lambda: now[0])
    assert pacer.refused(refusal(429, "more than 10 reports per minute", 4.0), 1) == 0.0
    assert pacer.resume_at == 104.0 and pacer.paused == 4.0
    assert pacer.refused(refusal(429, "more than 10 reports per minute", 3.0), 1) == 0.0  # within the pause already
    assert pacer.paused == 4.0
    now[0] = 104.0
    await pacer.ready()  # nothing left to wait
    with pytest.raises(Refused) as stopped:  # 4 s paused, 7 more asked: past the 10 s
        pacer.refused(refusal(429, "more than 10 reports per minute", 7.0), 1)
    message = str(stopped.value)
    assert message.startswith("the aggregator at http://agg.example kept refusing this replay's reports")
    assert "after pausing 4 s as it asked" in message
    assert "python -m aggregator serve --rate-limit 500" in message
    # No Retry-After (the network, say): a few retries with a growing wait, then the party named.
    waits = [pacer.refused(SubmissionFailed("POST u failed; last: OSError: refused"), n) for n in range(1, 5)]
    assert waits == [0.2, 0.4, 0.8, 1.6]
    with pytest.raises(Refused, match="the aggregator at http://agg.example could not be used"):
        pacer.refused(SubmissionFailed("POST u failed; last: OSError: refused"), 5)
