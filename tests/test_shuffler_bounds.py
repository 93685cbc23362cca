"""What one party may cost the shuffler, and when a device hears ``accepted``, against a real
shuffler process: reports per address, per collection and waiting (429 with ``Retry-After``);
bodies refused at their declared or streamed length; an unknown collection asked of the
aggregator once per interval; and no acknowledgement before the report is committed."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import urllib.error
import urllib.request

import pytest

from participant import AsyncClient, Limits, SubmissionFailed
from participant.sealing import sealed_length
from participant.view import ShuffledView

from .hostile import Proxy
from .servers import Server, ShufflerProcess, token_file, waiting_at
from .test_shuffled_guarantee import post, sealed_under
from .test_shuffler import RECORD, call, counted, create, wait_for

# What an app accepting these small floors and no dummies sets (a person's app keeps the defaults).
PERMISSIVE = Limits(min_batch=2, min_dummy_share=0)


@pytest.fixture(scope="module")
def aggregator(tmp_path_factory):
    """One real aggregator (SQLite) for this module's tests (starting one costs about a second of
    CPU), each under collection ids of its own."""
    server = Server(tmp_path_factory.mktemp("shared") / "aggregator.sqlite3").start()
    yield server
    server.stop()


def refusal(shuffler: str, cid: str, body: bytes, ctype: str = "application/ldpnb-sealed") -> tuple[int, dict, dict]:
    request = urllib.request.Request(f"{shuffler}/collections/{cid}/reports", data=body, method="POST", headers={"Content-Type": ctype})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    return refused.value.code, json.load(refused.value), dict(refused.value.headers)


async def test_rates_waiting_reports_and_bodies_are_bounded_and_unknown_collections_cost_one_request(aggregator, tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = aggregator
    async with Proxy(server.url) as watch:
        shuffler = ShufflerProcess(
            tmp_path / "s.sqlite3", watch.url, tmp_path / "token.txt", "--interval", "60", "--min-batch", "2", "--dummies", "0",
            "--per-address", "5", "--max-waiting", "4", "--max-post", "3",
        ).start()  # fmt: skip
        try:
            for cid in ("rates-a", "rates-b"):
                create(server, cid, shuffler.url, token, min_batch=50)
            # Off the event loop: the proxy the shuffler pins through runs on it.
            view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/rates-a/view"))
            for _ in range(4):
                assert post(shuffler.url, "rates-a", sealed_under(view)) == 201
            status, answer, _ = refusal(shuffler.url, "rates-a", sealed_under(view))
            assert status == 429 and "wait for a batch already" in answer["error"]
            other = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/rates-b/view"))
            assert post(shuffler.url, "rates-b", sealed_under(other)) == 201
            status, answer, headers = refusal(shuffler.url, "rates-b", sealed_under(other))
            assert status == 429 and "this address" in answer["error"] and int(headers["Retry-After"]) >= 1
            # An unknown id, asked again and again, is asked of the aggregator once.
            for _ in range(20):
                status, answer, _ = await asyncio.to_thread(refusal, shuffler.url, "nope", b"x")
                assert status == 404
            assert watch.seen[("GET", "/collections/nope")] == 1
        finally:
            shuffler.stop()
        shuffler = ShufflerProcess(
            tmp_path / "s.sqlite3", watch.url, tmp_path / "token.txt", "--interval", "60", "--max-post", "3",
        ).start()  # fmt: skip
        try:
            length = sealed_length(view.spec)
            # Declared longer than a sealed report: refused before a byte of it is read.
            with socket.create_connection(("127.0.0.1", shuffler.port), timeout=10) as conn:
                conn.sendall(
                    b"POST /collections/rates-b/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/ldpnb-sealed\r\n"
                    + f"Content-Length: {60 * 2**20}\r\n\r\n".encode()
                )
                assert conn.recv(200).startswith(b"HTTP/1.1 413")
            # Streamed past its limit (no length declared): refused as it passes it.
            def chunks():
                yield os.urandom(length)
                yield os.urandom(length)

            request = urllib.request.Request(f"{shuffler.url}/collections/rates-b/reports", data=chunks(), method="POST",
                                             headers={"Content-Type": "application/ldpnb-sealed", "Transfer-Encoding": "chunked"})  # fmt: skip
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 413
            import msgpack

            status, answer, _ = refusal(shuffler.url, "rates-b", msgpack.packb({"reports": [sealed_under(other)] * 4}), "application/msgpack")
            assert status == 413
        finally:
            shuffler.stop()


async def test_a_device_hears_accepted_only_once_its_report_is_committed(aggregator, tmp_path):
    """The shuffler's database stops (PostgreSQL, fast shutdown): its commit fails, the device
    hears no ``accepted`` (SubmissionFailed, the report kept to re-send); once it is back, the
    very same report goes in, and counts once."""
    from .postgres import PostgreSQL, server_directory

    token = token_file(tmp_path / "token.txt")
    server = aggregator
    with server_directory("shuffler-commit") as directory:
        pg = PostgreSQL(directory).start()
        url = pg.create_database("shuffler")
        shuffler = ShufflerProcess(url, server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0").start()
        try:
            create(server, "committed", shuffler.url, token, min_batch=2)
            call(f"{shuffler.url}/collections/committed/view")  # pinned before the database stops
            await asyncio.to_thread(pg.stop, "fast")
            try:
                async with AsyncClient(server.url, ledger=tmp_path / "d.json", pace=0.001, retries=0, shuffler=shuffler.url, limits=PERMISSIVE) as device:
                    with pytest.raises(SubmissionFailed, match="503"):
                        await device.submit("committed", RECORD)
            finally:
                await asyncio.to_thread(pg.start)
            entry = next(iter(json.loads((tmp_path / "d.json").read_text())["entries"].values()))
            assert entry["sent"] is False
            for ledger in ("d.json", "e.json"):  # the very same report again, then another person's
                async with AsyncClient(server.url, ledger=tmp_path / ledger, pace=0.001, shuffler=shuffler.url, limits=PERMISSIVE) as device:
                    assert await device.submit("committed", RECORD) == "accepted"
            await asyncio.to_thread(wait_for, lambda: counted(server, "committed") == 2)
        finally:
            shuffler.stop()
            pg.stop("fast")


async def test_closing_always_closes_and_releases_what_waits_padded_with_dummies(aggregator, tmp_path):
    """Seven reports wait for a batch of ten: closing without --pad closes (a refusal while too
    few wait would be a question asked again and again, telling when the first person came) and
    leaves the seven waiting, saying so; devices then hear 410. A close with --pad releases them at
    once, three dummies in place of the people missing and the batch's own two, counted as such."""
    import subprocess
    import sys

    from participant import ReportRejected

    from .servers import ADMIN

    token = token_file(tmp_path / "token.txt")
    server = aggregator
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0").start()
    try:
        create(server, "closing", shuffler.url, token, min_batch=10, dummies=2)
        for i in range(7):
            async with AsyncClient(server.url, ledger=tmp_path / f"d{i}.json", pace=0.001, shuffler=shuffler.url, limits=PERMISSIVE) as device:
                assert await device.submit("closing", RECORD) == "accepted"
        progress = call(f"{shuffler.url}/collections/closing")
        assert progress["closed"] is False and not {"waiting", "needed", "step"} & set(progress)

        def close(*extra: str) -> subprocess.CompletedProcess:
            env = {**os.environ, "LDPNB_ADMIN_TOKEN": ADMIN}
            command = [sys.executable, "-m", "aggregator", "close", "closing", "--url", server.url, "--shuffler-token-file", str(tmp_path / "token.txt"), *extra]
            return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)

        first = await asyncio.to_thread(close)
        assert first.returncode == 0 and "0 people's reports released in 0 batches" in first.stdout, first.stderr
        assert "7 fewer than a batch still wait: close again with --pad" in first.stdout
        assert counted(server, "closing") == 0 and waiting_exact(tmp_path / "s.sqlite3") == 7
        assert call(f"{shuffler.url}/collections/closing")["closed"] is True
        done = await asyncio.to_thread(close, "--pad")
        assert done.returncode == 0 and "7 people's reports released in 1 batches, 3 dummies in place of people" in done.stdout
        wait_for(lambda: counted(server, "closing") == 12)
        status = call(f"{server.url}/collections/closing/status", headers={"Authorization": f"Bearer {ADMIN}"})
        assert status["batches"] == {"batches": 1, "reports": 12, "dummies": 5, "junk": 0, "smallest": 7}
        assert status["shuffler"]["closed"] is True
        async with AsyncClient(server.url, ledger=tmp_path / "late.json", pace=0.001, retries=0, shuffler=shuffler.url, limits=PERMISSIVE) as device:
            with pytest.raises(ReportRejected, match="410"):
                await device.submit("closing", RECORD)
    finally:
        shuffler.stop()


async def test_a_report_acknowledged_while_its_collection_closes_is_released_not_stranded(aggregator, tmp_path):
    """Reports keep arriving, eight at a time, while the collection closes with pad: each is
    answered 201 and then counted by the aggregator, or 410 and never stored; none is
    acknowledged and left waiting (the close marks the collection closed before it counts what
    waits, and the store refuses reports of a closed collection in the same commit order)."""
    token = token_file(tmp_path / "token.txt")
    server = aggregator
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0",
                               "--per-address", "0", "--per-collection", "0").start()  # fmt: skip
    try:
        create(server, "racing", shuffler.url, token, min_batch=10, dummies=0)
        view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/racing/view"))
        statuses, done = await posting_while_closing(
            f"{shuffler.url}/collections/racing/reports", f"{shuffler.url}/collections/racing/close", token,
            [sealed_under(view) for _ in range(400)],
        )  # fmt: skip
        accepted, refused = statuses.count(201), statuses.count(410)
        assert accepted + refused == 400 and refused > 0, (accepted, refused)
        assert done["waiting"] == 0 and waiting_exact(tmp_path / "s.sqlite3") == 0
        wait_for(lambda: counted(server, "racing") == accepted + done["padding"], timeout=60)
    finally:
        shuffler.stop()


async def posting_while_closing(reports: str, close: str, token: str, bodies: list[bytes]) -> tuple[list[int], dict]:
    """Post ``bodies`` as single sealed reports to ``reports``, eight at a time, and once 40 are
    answered close the collection with pad at ``close``: every post's status, and the close's answer.
    The last 50 are posted only once the close has answered, so that some posts follow the close
    however late a loaded machine lets it arrive (the others race it)."""
    import aiohttp

    pending, statuses = iter(bodies[:-50]), []
    async with aiohttp.ClientSession() as session:

        async def sender() -> None:
            for body in pending:
                async with session.post(reports, data=body, headers={"Content-Type": "application/ldpnb-sealed"}) as answer:
                    statuses.append(answer.status)

        senders = [asyncio.ensure_future(sender()) for _ in range(8)]
        while len(statuses) < 40:
            await asyncio.sleep(0.005)
        for _ in range(50):  # a close meeting another instance's release round is told to retry, as an operator would
            async with session.post(close, json={"pad": True}, headers={"Authorization": f"Bearer {token}"}) as answer:
                if answer.status == 503 and "retry" in await answer.text():
                    await asyncio.sleep(0.1)
                    continue
                assert answer.status == 200, await answer.text()
                done = await answer.json()
                break
        else:
            raise AssertionError("the close was told to retry fifty times")
        await asyncio.gather(*senders)
        pending = iter(bodies[-50:])
        await asyncio.gather(*(sender() for _ in range(8)))
    return statuses, done


def waiting_exact(db) -> int:
    return waiting_at(db)


def test_no_other_process_opens_a_running_shufflers_file(aggregator, tmp_path):
    """A shuffler holds its SQLite file alone (another process holding it open could keep the log,
    in arrival order, from every scrub): a second shuffler on the same file refuses to start, in
    one line, and any other connection is refused its lock; the running one serves on."""
    import subprocess
    import sys

    token = token_file(tmp_path / "token.txt")
    server = aggregator
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60").start()
    try:
        create(server, "held", shuffler.url, token, min_batch=50)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/held/view"))
        second = subprocess.run(
            [sys.executable, "-m", "shuffler", "serve", "--aggregator", server.url, "--token-file", str(tmp_path / "token.txt"),
             "--db", str(tmp_path / "s.sqlite3"), "--port", "0"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert second.returncode == 2 and "held by another process" in second.stderr and second.stderr.count("\n") == 1
        other = sqlite3.connect(tmp_path / "s.sqlite3", timeout=0.2)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("SELECT count(*) FROM waiting").fetchone()
        other.close()
        assert not os.path.exists(f"{tmp_path / 's.sqlite3'}-shm")  # its log's index is in its memory
        assert call(f"{shuffler.url}/healthz")["status"] == "ok"
        assert post(shuffler.url, "held", sealed_under(view)) == 201
    finally:
        shuffler.stop()


def posted_from(shuffler: str, cid: str, sealed: bytes, forwarded: str) -> int:
    """The status of one report posted with ``X-Forwarded-For: forwarded`` (a 429 returned, not raised)."""
    request = urllib.request.Request(f"{shuffler}/collections/{cid}/reports", data=sealed, method="POST",
                                     headers={"Content-Type": "application/ldpnb-sealed", "X-Forwarded-For": forwarded})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code


async def test_the_per_address_cap_follows_x_forwarded_for_only_from_a_trusted_proxy(aggregator, tmp_path):
    """``--per-address 2``: a peer that is no trusted proxy names a new device in every
    X-Forwarded-For and is still held to two reports; from a trusted proxy (127.0.0.1) each device
    it names has two of its own, and a third from one of them is refused."""
    token = token_file(tmp_path / "token.txt")
    server = aggregator
    for trusted, cid in (("10.0.0.0/8", "spoofed"), ("127.0.0.1", "proxied")):
        shuffler = ShufflerProcess(
            tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60", "--min-batch", "2",
            "--dummies", "0", "--per-address", "2", "--trusted-proxy", trusted,
        ).start()  # fmt: skip
        try:
            create(server, cid, shuffler.url, token, min_batch=50)
            view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/{cid}/view"))
            devices = [f"198.51.100.{i}" for i in range(1, 5)]
            statuses = [posted_from(shuffler.url, cid, sealed_under(view), f"203.0.113.9, {d}") for d in devices]
            if cid == "spoofed":
                assert statuses == [201, 201, 429, 429]
            else:
                assert statuses == [201] * 4
                again = [posted_from(shuffler.url, cid, sealed_under(view), devices[0]) for _ in range(2)]
                assert again == [201, 429]
        finally:
            shuffler.stop()


def test_a_bad_trusted_proxy_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    token_file(tmp_path / "token.txt")
    done = subprocess.run(
        [sys.executable, "-m", "shuffler", "serve", "--aggregator", "http://127.0.0.1:9", "--token-file",
         str(tmp_path / "token.txt"), "--db", str(tmp_path / "s.sqlite3"), "--port", "0", "--trusted-proxy", "proxy.lan"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "python -m shuffler: error: --trusted-proxy takes an IP address or network, got 'proxy.lan'"
    ]
