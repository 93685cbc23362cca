"""The Python participant waits what a 429 or 503 answer's ``Retry-After`` asks, within the app's
bounds (``max_retry_after``, ``retry_deadline``), re-sending the same bytes; when its attempts end,
the error names the party that refused and the option its operator raises (issue 81). Against
real servers on loopback: scripted answers, a real aggregator at ``--rate-limit 1`` and a real
shuffler at ``--per-address 1``. Times are lower bounds only: a busy machine stretches them."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from email.utils import formatdate

import msgpack
import pytest
from aiohttp import web

from participant import AsyncClient, SubmissionFailed
from participant.retrying import JITTER, retry_after, wait_before
from participant.view import ShuffledView

from .servers import AUTH, MSGPACK, Server, ShufflerProcess, token_file
from .test_shuffled_guarantee import sealed_under
from .test_shuffler import RECORD, SPEC, call, create

ACCEPTED = msgpack.packb({"status": "accepted"})


class Answering:
    """A server on 127.0.0.1 answering each request from a script of ``(status, headers)``
    (then 201 accepted), recording when each request arrived and its body."""

    def __init__(self, script):
        self.script, self.seen = list(script), []

    async def handle(self, request):
        self.seen.append((time.monotonic(), await request.read()))
        if not self.script:
            return web.Response(status=201, body=ACCEPTED, content_type="application/msgpack")
        status, headers = self.script.pop(0)
        return web.json_response({"error": "slow down", "status": status}, status=status, headers=headers)

    async def __aenter__(self):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


async def test_a_429_asking_one_second_is_waited_then_the_same_bytes_are_sent_again():
    async with Answering([(429, {"Retry-After": "1"})]) as server:
        async with AsyncClient(server.url, ledger=None, backoff=0.01) as client:
            assert await client.send_report("c1", b"\x81\xa1a\x01") == "accepted"
    (first, sent), (again, resent) = server.seen
    assert again - first >= 1.0, f"waited {again - first:.3f} s of the 1 s asked"
    assert resent == sent == b"\x81\xa1a\x01"


async def test_an_http_date_is_waited_too():
    async with Answering([(503, {"Retry-After": formatdate(time.time() + 2, usegmt=True)})]) as server:
        async with AsyncClient(server.url, ledger=None, backoff=0.01) as client:
            assert await client.send_report("c1", b"\x80") == "accepted"
    (first, _), (again, _) = server.seen
    assert again - first >= 0.9  # the date has whole seconds: at least 1 s of the 2 s less the rounding


async def test_a_malformed_retry_after_falls_back_to_the_backoff(monkeypatch):
    waits, real_sleep = [], asyncio.sleep

    async def sleep(delay, *args):
        if delay:  # aiohttp's own sleep(0) calls land here too
            waits.append(delay)
        else:
            await real_sleep(0)

    monkeypatch.setattr("participant.client.asyncio.sleep", sleep)
    monkeypatch.setattr("participant.client.random.random", lambda: 0.5)
    script = [(429, {"Retry-After": "soon"}), (503, {"Retry-After": "-3"}), (429, {"Retry-After": "1e9"})]
    async with Answering(script) as server, AsyncClient(server.url, ledger=None, backoff=0.25) as client:
        assert await client.send_report("c1", b"\x80") == "accepted"
    assert waits == [0.25, 0.5, 1.0] and len(server.seen) == 4


async def test_a_wait_past_the_cap_or_the_deadline_ends_the_attempts_at_once_naming_the_party():
    async with Answering([(429, {"Retry-After": "61"})]) as server:
        async with AsyncClient(server.url, ledger=None, retries=5) as client:  # max_retry_after defaults to 60
            with pytest.raises(SubmissionFailed) as failed:
                await client.send_report("c1", b"\x80")
    assert len(server.seen) == 1
    message = str(failed.value)
    assert message.startswith(f"the aggregator at {server.url} refused: POST {server.url}/collections/c1/reports")
    assert "it asks to wait 61 s, over max_retry_after (60 s)" in message
    assert message.endswith("its operator can raise python -m aggregator serve --rate-limit")
    assert failed.value.retry_after == 61 and failed.value.status == 429

    async with Answering([(503, {"Retry-After": "2"})]) as server:
        async with AsyncClient(server.url, ledger=None, retries=5, retry_deadline=1.5) as client:
            with pytest.raises(SubmissionFailed, match=r"another wait would pass retry_deadline \(1.5 s\)") as failed:
                await client.send_report("c1", b"\x80")
    assert len(server.seen) == 1 and str(failed.value).startswith(f"the aggregator at {server.url} was unavailable:")


def test_the_wait_is_the_asked_one_jittered_upwards_or_the_backoff_when_longer():
    assert retry_after("7", 0.0) == 7.0 and retry_after(" 2.5 ", 0.0) == 2.5
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0) == 0.0  # a date passed: no wait asked
    for malformed in (None, "", "soon", "-1", "inf", "nan", "1e3", "Wed, 21 Oct 2015 07:28:00"):
        assert retry_after(malformed, 0.0) is None, malformed
    assert retry_after("9" * 400, 0.0) == float("inf")  # past any float: over any cap, as Node reads it
    for draw in (0.0, 0.5, 0.999):
        assert 3.0 <= wait_before(1, 0.2, 3.0, draw) <= 3.0 * (1 + JITTER)
        assert wait_before(4, 1.0, 3.0, draw) == max(8.0 * (0.5 + draw), 3.0 * (1 + JITTER * draw))
    assert wait_before(1, 0.2, None, 0.5) == 0.2 and wait_before(3, 0.2, 0.1, 0.5) == 0.8
    assert wait_before(1, 0.2, 3.0, 0.0) == 3.0 and wait_before(1, 0.2, 3.0, 0.999) > 3.5


def test_bad_bounds_are_refused():
    for name in ("max_retry_after", "retry_deadline"):
        for bad in (-1, float("inf"), "60", True):
            with pytest.raises(ValueError, match=name):
                AsyncClient("http://127.0.0.1:9", ledger=None, **{name: bad})


async def test_a_real_aggregators_rate_limit_names_the_aggregator_and_rate_limit(tmp_path):
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--rate-limit", "1").start()
    try:
        call(f"{server.url}/collections", "POST", {"spec": SPEC.to_dict(), "id": "c", "min_reports": 1}, AUTH)
        async with AsyncClient(server.url, ledger=None, pace=0.001, retries=3, max_retry_after=5) as client:
            assert await client.submit("c", RECORD) == "accepted"
            with pytest.raises(SubmissionFailed) as failed:  # a minute's one report spent: Retry-After about 60
                await client.submit("c", RECORD)
        message = str(failed.value)
        assert message.startswith(f"the aggregator at {server.url} refused:") and "failed after 1 attempts" in message
        assert "more than 1 reports per minute from this address" in message
        assert message.endswith("its operator can raise python -m aggregator serve --rate-limit")
        # The answer itself names the option, for any client.
        request = urllib.request.Request(f"{server.url}/collections/c/reports", data=b"\x80", headers=MSGPACK)
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
        answer = json.load(refused.value)
        assert refused.value.code == 429 and answer["option"] == "--rate-limit"
        assert answer["error"].endswith("its operator can raise python -m aggregator serve --rate-limit")
    finally:
        server.stop()


async def test_a_real_shufflers_per_address_limit_names_the_shuffler_and_per_address(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(
        tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60", "--min-batch", "2",
        "--dummies", "0", "--per-address", "1",
    ).start()  # fmt: skip
    try:
        create(server, "s", shuffler.url, token, min_batch=50)
        view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/s/view"))
        async with AsyncClient(server.url, ledger=None, shuffler=shuffler.url, retries=3, max_retry_after=5) as client:
            assert await client.send_report("s", sealed_under(view), client.shuffler) == "accepted"
            with pytest.raises(SubmissionFailed) as failed:
                await client.send_report("s", sealed_under(view), client.shuffler)
        message = str(failed.value)
        assert message.startswith(f"the shuffler at {shuffler.url} refused: POST {shuffler.url}/collections/s/reports")
        assert "failed after 1 attempts; it asks to wait" in message and "over max_retry_after (5 s); " in message
        assert "; last: 429 too many reports from this address (at most 1 a minute)" in message
        assert message.endswith("its operator can raise python -m shuffler serve --per-address")
        assert failed.value.option == "python -m shuffler serve --per-address"
        assert failed.value.party == f"the shuffler at {shuffler.url}"
        # The answer itself names the option, for any client.
        headers = {"Content-Type": "application/ldpnb-sealed"}
        request = urllib.request.Request(f"{shuffler.url}/collections/s/reports", data=sealed_under(view), headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
        answer = json.load(refused.value)
        assert refused.value.code == 429 and answer["option"] == "--per-address"
        assert answer["error"].endswith("its operator can raise python -m shuffler serve --per-address")
    finally:
        shuffler.stop()
        server.stop()


def test_a_trial_runs_stop_names_the_party_the_client_named():
    from sim.spec_runs import cannot_use

    refused = SubmissionFailed(
        "the shuffler at http://127.0.0.1:8082 refused: POST http://127.0.0.1:8082/collections/c/reports failed after "
        "6 attempts; last: 429 too many reports from this address (at most 600 a minute); its operator can raise "
        "python -m shuffler serve --per-address",
        party="the shuffler at http://127.0.0.1:8082", status=429,
    )  # fmt: skip
    assert cannot_use(refused) == str(refused)
    assert cannot_use(OSError("refused")) == "cannot use the aggregator: OSError: refused"
