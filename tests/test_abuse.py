"""Anonymous abuse: allocation bombs, one address holding every connection, forged forwarding
headers, ids and specs the database cannot take, and nothing internal in public answers."""

from __future__ import annotations

import asyncio
import socket
import time
import tracemalloc

import aiohttp
import msgpack
import pytest

from participant.addresses import parse_networks
from aggregator.service.app import create_app, open_store, start_site
from aggregator.service.keys import Config
from aggregator.store.postgres import redacted
from participant import Participant
from participant.wire import ReportError, pack_report, unpack

from .conftest import TABLE_1, table_1_spec
from .test_service import ADMIN, AUTH, MSGPACK, service  # noqa: F401 (the fixture)

RECORD = dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[0]))


@pytest.fixture
async def configured(tmp_path):
    """Start a SQLite service with a given :class:`Config`; returns its URL."""
    started = []

    async def start(**config):
        store, _ = await open_store(tmp_path / f"abuse{len(started)}.sqlite3", ADMIN)
        runner, url = await start_site(await create_app(store, Config(**config)))
        started.append((runner, store))
        return url

    yield start
    for runner, store in started:
        await runner.cleanup()
        await store.close()


def array32(count: int, item: bytes) -> bytes:
    return b"\xdd" + count.to_bytes(4, "big") + item * count


@pytest.mark.parametrize("name, body", [
    ("8 MiB of empty arrays", array32(8 << 20, b"\x90")),
    ("8 MiB of empty maps", array32(8 << 20, b"\x80")),
    ("a batch of empty arrays", msgpack.packb({"reports": [[]] * 10_000})),
    ("arrays nested deep", b"\x91" * 200_000 + b"\x90"),
    ("a batch one over", msgpack.packb({"reports": [{}] * 10_001})),
])  # fmt: skip
def test_bodies_larger_than_any_batch_are_refused_while_unpacking(name, body):
    tracemalloc.start()
    with pytest.raises(ReportError):
        unpack(body, 10_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # Unpacked whole, 8 MiB of empty arrays took 628 MB and 12 s: the memory tells it, whatever
    # the machine's load (a time would not).
    assert peak < 20 * 2**20, (name, peak)


def test_a_batch_at_the_limit_still_unpacks():
    spec = table_1_spec()
    wire = msgpack.unpackb(pack_report(Participant(spec).report(RECORD), spec))
    assert len(unpack(msgpack.packb({"reports": [wire] * 10_000}), 10_000)["reports"]) == 10_000


async def test_the_service_answers_a_bomb_400_and_stays_responsive(service):  # noqa: F811
    await service.create(table_1_spec())
    status, data = await service.post("/collections/c1/reports", array32(60_000, b"\x90"))  # under the size limit
    assert status == 413 and data["reason"] == "batch_too_large"
    status, data = await service.post("/collections/c1/reports", msgpack.packb({"reports": [[]] * 400}))
    assert status == 400 and data["reason"] == "malformed"
    assert (await service.get("/healthz"))[0] == 200


@pytest.mark.parametrize("path", ["/collections/%00", "/collections/a%00b/reports", "/collections/%00/estimates"])
async def test_an_id_no_collection_can_have_is_400_on_every_backend(service, path):  # noqa: F811
    method = service.session.post if path.endswith("/reports") else service.session.get
    async with method(service.url + path, data=b"\x80", headers=MSGPACK) as r:
        assert r.status == 400 and "1-64 letters" in (await r.json())["error"]


async def test_a_new_collection_id_may_not_begin_with_a_dash(service):  # noqa: F811
    body = {"spec": table_1_spec().to_dict(), "id": "-survey"}
    async with service.session.post(f"{service.url}/collections", json=body, headers=AUTH) as r:
        assert r.status == 400 and "must not begin with '-'" in (await r.json())["error"]
    async with service.session.post(f"{service.url}/collections", json={**body, "id": "sur-vey"}, headers=AUTH) as r:
        assert r.status == 201


@pytest.mark.parametrize("projection", [1, "x", [], [1, 2]])
async def test_a_malformed_projection_is_400_naming_it(service, projection):  # noqa: F811
    spec = {
        "classes": ["a", "b"], "protocol": "DE", "epsilon": 1.0, "model": "gaussian",
        "continuous": {"inputs": [{"name": "x", "low": 0, "high": 1}], "projection": projection},
    }  # fmt: skip
    async with service.session.post(f"{service.url}/collections", json={"spec": spec}, headers=AUTH) as r:
        assert r.status == 400 and "projection" in (await r.json())["error"]


def _connect_from(host: str, port: int, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    sock.sendall(
        b"POST /collections/c1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
        b"Content-Length: 100\r\n\r\n"
    )  # and then nothing: the body drips, or never comes
    return sock


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(0.5)
    try:
        return sock.recv(200)
    except TimeoutError:
        return b""  # still waiting for its body: the connection was taken


async def test_one_address_cannot_hold_every_connection(configured):
    url = await configured(max_connections=20, max_connections_per_address=4)
    async with aiohttp.ClientSession() as session:
        body = {"spec": table_1_spec().to_dict(), "id": "c1"}
        async with session.post(f"{url}/collections", json=body, headers=AUTH) as r:
            assert r.status == 201
    await asyncio.sleep(0.2)  # that connection closed
    host, port = url.removeprefix("http://").split(":")
    # Six slow connections from 127.0.0.1: four held, the others refused at once, saying when to retry.
    held = [await asyncio.to_thread(_connect_from, host, int(port), "127.0.0.1") for _ in range(6)]
    answers = [await asyncio.to_thread(_answer, s) for s in held]
    assert [a[:12] for a in answers].count(b"HTTP/1.1 503") == 2 and answers.count(b"") == 4
    assert all(b"Retry-After: " in a for a in answers if a)
    # Its neighbour in the same /24 counts with it; another network is served meanwhile.
    neighbour = await asyncio.to_thread(_connect_from, host, int(port), "127.0.0.2")
    assert (await asyncio.to_thread(_answer, neighbour))[:12] == b"HTTP/1.1 503"
    other = await asyncio.to_thread(_connect_from, host, int(port), "127.0.1.2")
    assert await asyncio.to_thread(_answer, other) == b""
    for sock in [*held, neighbour, other]:
        sock.close()
    await asyncio.sleep(0.2)
    async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as r:
        assert r.status == 200  # the slots come back when the connections close


async def test_rate_limits_key_on_the_device_behind_a_trusted_proxy_only(configured):
    spec = table_1_spec()

    async def post_as(session, url, forwarded):
        body = pack_report(Participant(spec).report(RECORD), spec)
        headers = {**MSGPACK, "X-Forwarded-For": forwarded}
        async with session.post(f"{url}/collections/c1/reports", data=body, headers=headers) as r:
            return r.status

    async with aiohttp.ClientSession() as session:
        for trusted, expected in (("127.0.0.1", [201, 201, 429, 201]), ("", [201, 201, 429, 429])):
            url = await configured(rate_limit=2, trusted_proxies=parse_networks([trusted] if trusted else []))
            async with session.post(
                f"{url}/collections", json={"spec": spec.to_dict(), "id": "c1"}, headers=AUTH
            ) as r:
                assert r.status == 201
            # Behind a trusted proxy, 10.0.0.1 and 10.0.0.2 are two devices; without one, a forged
            # header changes nothing: every request is 127.0.0.1's.
            statuses = [await post_as(session, url, f) for f in ("6.6.6.6, 10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2")]
            assert statuses == expected, (trusted, statuses)


def test_passwords_are_redacted_from_database_urls_wherever_they_stand():
    url = "postgresql://ldpnb:s3cret@db.internal:5432/ldpnb?password=an0ther&sslmode=require&sslpassword=k3y"
    shown = redacted(url)
    assert not any(secret in shown for secret in ("s3cret", "an0ther", "k3y"))
    assert shown == "postgresql://ldpnb:***@db.internal:5432/ldpnb?password=***&sslmode=require&sslpassword=***"


async def test_cached_answers_are_built_once_and_bounded_in_bytes():
    from aggregator.service.answers import AnswerCache

    builds = []

    async def produce(size):
        builds.append(size)
        await asyncio.sleep(0.01)
        return b"x" * size

    cache = AnswerCache(size=8, max_bytes=1000)
    answers = await asyncio.gather(*(cache.get("a", lambda stop: produce(400)) for _ in range(5)))
    assert builds == [400] and all(a == b"x" * 400 for a in answers)  # four waited on the one build
    await cache.get("b", lambda stop: produce(400))
    await cache.get("c", lambda stop: produce(400))  # 1,200 bytes held: the oldest goes
    assert list(cache._answers) == ["b", "c"]
    await cache.get("b", lambda stop: produce(400))
    assert builds == [400, 400, 400]  # b served from the cache


async def test_a_build_no_client_waits_for_is_stopped_and_one_still_awaited_is_not(monkeypatch):
    """Two clients wait for one build: the first leaving changes nothing; once the second leaves
    too, the build is cancelled and its encoding, on a worker thread, stops at the next slice;
    asked again, it is built afresh."""
    import threading

    from aggregator.service import answers
    import numpy as np

    from aggregator.service.answers import AnswerCache, Cancelled, encode_json

    monkeypatch.setattr(answers, "POLL_SECONDS", 0.02)
    ended = []
    started, gate = threading.Event(), threading.Event()

    def encode(stop):
        started.set()
        gate.wait(10)  # the build is under way while the clients come and go
        try:
            return encode_json(np.arange(answers.SLICE * 100), stop)
        except Cancelled:
            ended.append("stopped")
            raise

    async def produce(stop):
        return await asyncio.to_thread(encode, stop)

    cache = AnswerCache()
    present = {"first": True, "second": True}
    first = asyncio.create_task(cache.get("m", produce, lambda: not present["first"]))
    second = asyncio.create_task(cache.get("m", produce, lambda: not present["second"]))
    await asyncio.to_thread(started.wait, 10)
    present["first"] = False
    with pytest.raises(Cancelled):
        await first
    assert not second.done() and "m" in cache._answers  # still built for the second
    present["second"] = False
    with pytest.raises(Cancelled):
        await second
    assert "m" not in cache._answers
    gate.set()
    async with asyncio.timeout(10):
        while not ended:
            await asyncio.sleep(0.01)
    assert ended == ["stopped"]  # the thread saw the stop at its first slice
    assert await cache.get("m", lambda stop: asyncio.sleep(0, b"again")) == b"again"


def _idle_keep_alive(host: str, port: int, source: str) -> socket.socket:
    """A connection from ``source`` that asks /healthz once and then stays open, idle."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    answer = b""
    while b'"ok"' not in answer and b"503" not in answer:
        answer += sock.recv(4096)
    return sock


async def test_four_networks_holding_every_slot_do_not_starve_another_client(configured):
    """Four networks each hold 256 connections (the per-network cap), all 1,024 slots: a client of
    a fifth network is still served, in the slot of the longest-idle connection of a largest
    network; one more from a network at its cap is refused, saying when to retry."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # both ends of 1,024 sockets live here
    url = await configured(max_connections=1024, max_connections_per_address=256)
    host, port = url.removeprefix("http://").split(":")
    held = []
    try:
        for network in (1, 2, 3, 4):
            held += await asyncio.to_thread(
                lambda n=network: [_idle_keep_alive(host, int(port), f"127.0.{n}.1") for _ in range(256)]
            )
        newcomer = await asyncio.to_thread(_idle_keep_alive, host, int(port), "127.0.5.1")
        held.append(newcomer)
        assert b"200 OK" in await asyncio.to_thread(_answer_again, newcomer)
        over = await asyncio.to_thread(_connect_from, host, int(port), "127.0.2.9")
        refusal = await asyncio.to_thread(_answer, over)
        assert refusal[:12] == b"HTTP/1.1 503" and b"Retry-After: " in refusal
        held.append(over)
    finally:
        for sock in held:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _answer_again(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock.recv(4096)


async def test_a_trusted_proxy_is_not_capped_per_address(configured):
    url = await configured(max_connections=20, max_connections_per_address=4, trusted_proxies=parse_networks(["127.0.0.1"]))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections", json={"spec": table_1_spec().to_dict(), "id": "c1"}, headers=AUTH) as r:
            assert r.status == 201
    await asyncio.sleep(0.2)
    host, port = url.removeprefix("http://").split(":")
    held = [await asyncio.to_thread(_connect_from, host, int(port), "127.0.0.1") for _ in range(6)]
    try:
        assert [await asyncio.to_thread(_answer, s) for s in held] == [b""] * 6  # every one held, none refused
    finally:
        for sock in held:
            sock.close()


async def test_forwarded_addresses_count_only_from_a_trusted_proxy_and_only_as_addresses(configured):
    spec = table_1_spec()

    async def statuses(url, forwarded: list[str]) -> list[int]:
        out = []
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/collections", json={"spec": spec.to_dict(), "id": "c1"}, headers=AUTH) as r:
                assert r.status == 201
            for value in forwarded:
                body = pack_report(Participant(spec).report(RECORD), spec)
                headers = {**MSGPACK, "X-Forwarded-For": value}
                async with session.post(f"{url}/collections/c1/reports", data=body, headers=headers) as r:
                    out.append(r.status)
        return out

    # A proxy is trusted, but not this peer: its forwarded addresses are whatever it chose to send.
    elsewhere = await configured(rate_limit=2, trusted_proxies=parse_networks(["10.0.0.0/8"]))
    assert await statuses(elsewhere, ["192.0.2.1", "192.0.2.2", "192.0.2.3"]) == [201, 201, 429]
    # Behind a trusted proxy, names that are no address count against the proxy, not as new devices.
    behind = await configured(rate_limit=2, trusted_proxies=parse_networks(["127.0.0.1"]))
    assert await statuses(behind, ["not-an-ip-1", "not-an-ip-2", "not-an-ip-3", "10.9.9.9"]) == [201, 201, 429, 201]


def _raw(host: str, port: int, request: bytes, wait: float = 2.0) -> tuple[bytes, float]:
    """What the service answers to ``request`` sent raw, and how long the first bytes took."""
    sock = socket.create_connection((host, port))
    sock.settimeout(wait)
    start = time.monotonic()
    sock.sendall(request)
    answer = b""
    try:
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    except TimeoutError:
        pass
    finally:
        sock.close()
    return answer, time.monotonic() - start


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /\r\n\r\n", b"505"),  # HTTP/0.9: no page
    (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", b"505"),
    (b"GET http://elsewhere.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),  # an absolute URI
    (b"POST /collections/c1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 9437184\r\n\r\n", b"413"),  # 9 MiB never sent
    (b"POST /collections/c1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Type: application/msgpack\r\n\r\nZZ\r\nab\r\n0\r\n\r\n", b"400"),  # chunks broken at once
    (b"GET /%00%ff HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
])  # fmt: skip
async def test_requests_outside_http_1_are_refused_up_front_in_json(configured, caplog, request_bytes, status):
    url = await configured()
    host, port = url.removeprefix("http://").split(":")
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections", json={"spec": table_1_spec().to_dict(), "id": "c1"}, headers=AUTH) as r:
            assert r.status == 201 and r.headers["Server"] == "ldpnb"  # no language or framework versions
    answer, _ = await asyncio.to_thread(_raw, host, int(port), request_bytes, 10.0)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == status and b"Server: ldpnb" in head and body.startswith(b'{"error"'), answer
    # The 9 MiB body is never sent: an answer at all (not a timeout) says it was not waited for.
    assert "Traceback" not in caplog.text and "unhandled error" not in caplog.text


async def test_a_client_that_goes_away_mid_body_costs_a_log_line_not_a_traceback(configured, caplog):
    """A chunked body that breaks its framing and then its connection, while the handler reads it:
    one line in the log (aiohttp logged the handler's error with a full traceback)."""
    import logging

    caplog.set_level(logging.INFO, logger="ldpnb.aggregator")
    url = await configured()
    host, port = url.removeprefix("http://").split(":")
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections", json={"spec": table_1_spec().to_dict(), "id": "c1"}, headers=AUTH) as r:
            assert r.status == 201

    def staged() -> None:
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /collections/c1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/msgpack\r\n\r\n2\r\n\x81\xa1\r\n")  # fmt: skip
        time.sleep(0.3)  # the handler waits for the rest of the body
        sock.sendall(b"ZZ\r\n")
        sock.close()

    await asyncio.to_thread(staged)
    await asyncio.sleep(0.5)
    assert "connection lost during POST /collections/c1/reports" in caplog.text
    assert "Traceback" not in caplog.text and "Error handling request" not in caplog.text
