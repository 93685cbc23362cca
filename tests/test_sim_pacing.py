"""A trial run through a shuffler from one machine (issue 81): the replay paces itself by the
``Retry-After`` of the shuffler's per-address limit and gets through; when it may not wait that
long, the refusal names the shuffler by URL and ``shuffler serve --per-address``."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

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
    # 1,250 reports a minute from one address: car's 1,382 training rows pass the burst, and the
    # rest, 21 a second, within about 7 s of pauses.
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(
        tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt",
        "--interval", "0.3", "--min-batch", "2", "--dummies", "0", "--per-address", "1250",
    ).start()  # fmt: skip
    try:
        create_shuffled(server, "shuf-1", shuffler.url, token)
        create_shuffled(server, "shuf-2", shuffler.url, token)
        run = ["--dataset", "car", "--via", "http", "--aggregator", server.url, "--clients", "32", "--json"]
        started = time.monotonic()
        assert main([*run, "--collection", "shuf-1"]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["sent"] == 1382 and time.monotonic() - started < 90
        (note,) = [line for line in err.splitlines() if "pacing by its Retry-After" in line]
        assert f"the shuffler at {shuffler.url} refused a report" in note and "at most 1250 a minute" in note
        assert "python -m shuffler serve --per-address 1382" in note
        row = shuffler.status()["shuf-1"]  # every report arrived (one may wait for a batch of two)
        assert row["forwarded"] + row["waiting"] == 1382

        # The address's allowance is spent: a replay that may pause half a second stops at once,
        # naming the shuffler (not the aggregator) and the option.
        monkeypatch.setattr(sim.pacing, "PATIENCE", 0.5)
        with pytest.raises(SystemExit) as stopped:
            main([*run, "--collection", "shuf-2"])
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert stopped.value.code == 2
        assert f"the shuffler at {shuffler.url} kept refusing this replay's reports" in last
        assert "python -m shuffler serve --per-address 1382" in last and "cannot use the aggregator" not in last
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
