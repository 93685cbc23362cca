"""Regression tests of the outside security review: each failed on the code before its fix."""

import asyncio
import functools
import gzip
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
import zlib

import aiohttp
import msgpack
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aggregator.operator.cli import main as serve_main
from aggregator.service.app import create_app, open_store, start_site
from aggregator.service.auth import TokenError
from aggregator.service.keys import Config
from participant import Participant

from .conftest import TABLE_1, table_1_spec
from .servers import Server
from .test_service import ADMIN, AUTH, MSGPACK, service, sqlite_service  # noqa: F401 (fixtures)

RECORD = dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[0]))


def serve_command(db, *extra) -> list[str]:
    return [sys.executable, "-m", "aggregator", "serve", "--db", str(db), "--port", "0", *extra]


def refusal(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """``serve``'s ``main`` run in this process on ``argv`` (what it prints and its exit code;
    :func:`test_a_weak_admin_token_stops_the_process_with_one_line` runs the process): its exit
    code and its stderr. A service it would start instead fails the test rather than serve."""
    from aggregator.operator import cli

    def serve_forever(*_):
        raise AssertionError(f"serve {argv} started the service")

    monkeypatch.setattr(cli, "run_loop", serve_forever)
    with pytest.raises(SystemExit) as exited:
        serve_main(argv)
    return exited.value.code, capsys.readouterr().err


# 1. Admin token


@pytest.mark.parametrize("token", ["", "short", " " * 30, "a" * 21, "\u00a0" * 25, "valid-length-but has space"])
def test_a_weak_admin_token_is_refused_at_start_with_one_line(tmp_path, token, monkeypatch, capsys):
    monkeypatch.setenv("LDPNB_ADMIN_TOKEN", token)
    code, stderr = refusal(serve_command(tmp_path / "db.sqlite3")[3:], capsys, monkeypatch)
    assert code == 2
    assert "admin token" in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) <= 2  # usage line and the error line


def test_a_weak_admin_token_stops_the_process_with_one_line(tmp_path):
    result = subprocess.run(
        serve_command(tmp_path / "db.sqlite3"),
        env={**os.environ, "LDPNB_ADMIN_TOKEN": "short"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "admin token" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # usage line and the error line


async def test_a_stored_admin_token_is_replaced_only_when_asked(database):
    first = "first-admin-token-0123456789"
    store, _ = await open_store(database, first)
    await store.close()
    with pytest.raises(TokenError, match="--rotate-admin-token"):
        await open_store(database, "second-admin-token-0123456789")
    store, shown = await open_store(database)  # no token: the stored hash stays
    assert shown is None
    await store.close()
    store, _ = await open_store(database, "second-admin-token-0123456789", rotate=True)
    runner, url = await start_site(await create_app(store))
    try:
        async with aiohttp.ClientSession() as session:
            for token, status in ((first, 403), ("second-admin-token-0123456789", 200)):
                async with session.get(f"{url}/collections", headers={"Authorization": f"Bearer {token}"}) as r:
                    assert r.status == status
    finally:
        await runner.cleanup()
        await store.close()


@pytest.mark.parametrize("space", ["\u00a0", "\u3000", "\u0085", " ", "\t"])
async def test_unicode_whitespace_is_never_a_token(service, space):  # noqa: F811
    headers = [f"Bearer {space}", f"Bearer {space}{ADMIN}"]
    if space not in " \t":  # HTTP itself trims ASCII spaces and tabs around a header value
        headers.append(f"Bearer {ADMIN}{space}")
    for header in headers:
        async with service.session.post(
            f"{service.url}/collections",
            data=f'{{"spec": {table_1_spec().to_json()}}}'.encode(),
            headers={"Authorization": header.encode("utf-8").decode("latin-1"), "Content-Type": "application/json"},
        ) as r:
            assert r.status in (401, 403), header
    assert await service.store.list_collections() == []


async def test_failed_admin_attempts_are_throttled(service):  # noqa: F811
    statuses = []
    for _ in range(12):
        async with service.session.get(f"{service.url}/collections", headers={"Authorization": "Bearer wrong"}) as r:
            statuses.append(r.status)
    assert statuses[:10] == [403] * 10 and statuses[10:] == [429, 429]
    # Wrong tokens from a shared address (a load balancer) never lock out the right one.
    for _ in range(6):
        async with service.session.get(f"{service.url}/collections", headers=AUTH) as r:
            assert r.status == 200
        async with service.session.get(f"{service.url}/collections", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 429


def test_the_admin_token_is_read_from_a_file_not_argv(tmp_path, capsys, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("file-admin-token-0123456789\n")
    token_file.chmod(0o644)  # readable by every user of the machine: refused, naming the fix
    code, stderr = refusal(
        serve_command(tmp_path / "y.sqlite3", "--admin-token-file", str(token_file))[3:], capsys, monkeypatch
    )
    assert code == 2 and f"is readable by others (mode 0644); chmod 600 {token_file}" in stderr
    token_file.chmod(0o600)
    server = Server(tmp_path / "db.sqlite3", None, 1, "--admin-token-file", str(token_file))
    server.start()
    try:
        import urllib.request

        request = urllib.request.Request(
            f"{server.url}/collections", headers={"Authorization": "Bearer file-admin-token-0123456789"}
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
    finally:
        server.stop()
    code, stderr = refusal(serve_command(tmp_path / "x.sqlite3", "--admin-token", "t" * 30)[3:], capsys, monkeypatch)
    assert code == 2 and "unrecognized arguments: --admin-token" in stderr


# 2. Compressed bodies are never inflated


@functools.lru_cache(maxsize=1)
def bomb(inflated: int) -> bytes:
    """``inflated`` bytes of zeros (a whole number of MiB), gzipped: one MiB deflated after a full
    flush (which empties the window, so every MiB deflates to the same bytes), repeated, closed
    by an empty final block, the CRC-32 and the length. Deflating the whole GiB instead takes
    seconds of CPU."""
    chunk = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the gzip framing is written here
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = functools.reduce(lambda c, _: zlib.crc32(chunk, c), range(inflated >> 20), 0)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, no time, best, unknown OS
    trailer = compressor.flush() + crc.to_bytes(4, "little") + (inflated & 0xFFFFFFFF).to_bytes(4, "little")
    return header + block * (inflated >> 20) + trailer


async def test_a_gzip_bomb_is_refused_without_inflating_it(service):  # noqa: F811
    body = bomb(1 << 30)  # 1 GiB of zeros in about 1 MB
    assert len(body) < 2 << 20
    await service.create(table_1_spec())
    worst = 0.0

    async def probe():
        nonlocal worst
        for _ in range(30):
            start = time.perf_counter()
            async with service.session.get(f"{service.url}/healthz") as r:
                assert r.status == 200
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(0.02)

    async def send(path):
        async with service.session.post(
            f"{service.url}{path}", data=body, headers={"Content-Encoding": "gzip", **MSGPACK}
        ) as r:
            return r.status, await r.json()

    paths = ["/collections/c1/reports", "/collections", "/healthz", "/collections/c1/reports"]
    answers, _ = await asyncio.gather(asyncio.gather(*(send(p) for p in paths)), probe())
    assert [a[0] for a in answers] == [415, 415, 415, 415]
    assert "Content-Encoding" in answers[0][1]["error"]
    # Refused unread, health never waits as long as inflating a quarter of one bomb takes: timed
    # here, beside the probes, on the same loaded machine (inflating on the server's loop held them).
    inflater, started = zlib.decompressobj(31), time.perf_counter()
    pending = body
    for _ in range(16):
        inflater.decompress(pending, 1 << 24)
        pending = inflater.unconsumed_tail
    assert worst < (time.perf_counter() - started) / 2, worst
    assert await service.n_reports() == 0
    # The plain body still works.
    report = Participant(table_1_spec()).report(RECORD)
    from participant.wire import pack_report

    assert (await service.post("/collections/c1/reports", pack_report(report, table_1_spec())))[0] == 201
    assert gzip.decompress(gzip.compress(b"x")) == b"x"


# 3. The database file is private


async def test_the_database_and_its_journal_are_private(tmp_path):
    db = tmp_path / "private.sqlite3"
    old = os.umask(0o022)
    try:
        store, _ = await open_store(db, ADMIN)
        await store.create_collection("c1", table_1_spec(), 0)
        for suffix in ("", "-wal", "-shm"):
            mode = stat.S_IMODE(os.stat(f"{db}{suffix}").st_mode)
            assert mode == 0o600, (suffix, oct(mode))
        await store.close()
        os.chmod(db, 0o644)  # an older database, readable by all: tightened at the next start
        store, _ = await open_store(db)
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
        await store.close()
    finally:
        os.umask(old)


# 4. A deleted database or a full disk is reported, and writes are refused


async def test_a_deleted_database_answers_503_and_refuses_reports(sqlite_service):  # noqa: F811
    service = sqlite_service  # noqa: F811 (this test wants the SQLite one)
    spec = table_1_spec()
    await service.create(spec)
    from participant.wire import pack_report

    body = pack_report(Participant(spec).report(RECORD), spec)
    for suffix in ("", "-wal", "-shm"):
        os.remove(service.db_path + suffix)
    status, data = await service.get("/healthz")
    assert status == 503 and "deleted" in data["reason"]
    status, data = await service.post("/collections/c1/reports", body)
    assert status == 503 and "deleted" in data["error"]
    # A collection created now would vanish at restart: refused too, not answered 201.
    async with service.session.post(
        f"{service.url}/collections", json={"spec": spec.to_dict(), "id": "c2"}, headers=AUTH
    ) as r:
        created = await r.json()
        assert r.status == 503 and "deleted" in created["error"] and r.headers["Retry-After"]
    # None of these answers names the file.
    assert all(os.path.basename(service.db_path) not in json.dumps(d) for d in (data, created))


async def test_a_full_disk_answers_503_until_a_write_succeeds(sqlite_service):  # noqa: F811
    service = sqlite_service  # noqa: F811 (this test wants the SQLite one)
    spec = table_1_spec(protocol="OUE")
    await service.create(spec)
    # The file may not grow: SQLite's "disk full", set on the connection reports are written through.
    conn = service.store._writes
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    from participant.wire import pack_batch

    reports = [Participant(spec).report(RECORD) for _ in range(400)]
    status, data = await service.post("/collections/c1/reports", pack_batch(reports, spec))
    assert status == 503 and "full" in data["error"]
    status, data = await service.get("/healthz")
    assert status == 503 and "full" in data["reason"]
    assert await service.count() == 0 and await service.n_reports() == 0
    conn.execute("PRAGMA max_page_count = 1073741823")
    status, data = await service.post("/collections/c1/reports", pack_batch(reports[:5], spec))
    assert status == 200 and data["accepted"] == 5
    assert (await service.get("/healthz"))[0] == 200


# 8. Collection ids, metrics


async def test_an_id_with_a_trailing_newline_is_refused_and_metrics_stay_parsable(service):  # noqa: F811
    spec = table_1_spec()
    for bad in ("abc\n", "abc\r", "a b", "x" * 65, ""):
        async with service.session.post(
            f"{service.url}/collections", json={"spec": spec.to_dict(), "id": bad}, headers=AUTH
        ) as r:
            assert r.status == 400 if bad else r.status == 201, bad
    async with service.session.get(f"{service.url}/metrics") as r:
        families = {f.name for f in text_string_to_metric_families(await r.text())}
    assert "ldpnb_reports_rejected" in families


async def test_a_stored_invalid_id_stops_the_start_with_a_clear_message(tmp_path):
    db = tmp_path / "old.sqlite3"
    store, _ = await open_store(db, ADMIN)
    await store.create_collection("fine", table_1_spec(), 0)
    await store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE collections SET id = 'abc' || char(10)")
    conn.commit()
    conn.close()
    result = subprocess.run(
        serve_command(db), env={**os.environ, "LDPNB_ADMIN_TOKEN": ADMIN}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "invalid id 'abc\\n'" in result.stderr and "Traceback" not in result.stderr


async def test_metrics_name_collections_only_when_asked(tmp_path):
    store, _ = await open_store(tmp_path / "m.sqlite3", ADMIN)
    await store.create_collection("secret-survey", table_1_spec(), 0)
    for per_collection in (False, True):
        runner, url = await start_site(await create_app(store, Config(metrics_per_collection=per_collection)))
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as r:
            text = await r.text()
        await runner.cleanup()
        assert ("secret-survey" in text) == per_collection
        list(text_string_to_metric_families(text))
    await store.close()


# 9-11. Extreme and malformed admin input


@pytest.mark.parametrize("protocol", ["SHE", "THE", "DE", "OUE"])
@pytest.mark.parametrize("epsilon", [1e-3, 50.0])
async def test_the_ends_of_the_epsilon_range_work_end_to_end(service, protocol, epsilon):  # noqa: F811
    spec = table_1_spec(protocol=protocol, epsilon=epsilon)
    await service.create(spec)
    from participant.wire import pack_batch

    participant = Participant(spec, rng=np.random.default_rng(0))
    reports = [participant.report(dict(zip(RECORD, row))) for row in TABLE_1 * 12]
    status, data = await service.post("/collections/c1/reports", pack_batch(reports, spec))
    assert status == 200 and data["accepted"] == 120
    for path in ("/collections/c1/estimates", "/collections/c1/model", "/metrics"):
        async with service.session.get(service.url + path) as r:
            assert r.status == 200, (path, await r.text())
    async with service.session.get(f"{service.url}/collections/c1/plausibility", headers=AUTH) as r:
        assert r.status == 200


ADMIN_INPUTS = [
    ({"epsilon": 5e-324}, "epsilon"),
    ({"epsilon": 1e-300}, "epsilon"),
    ({"epsilon": 1000}, "epsilon"),
    ({"epsilon": 1e308}, "epsilon"),
    ({"epsilon": "DIGITS400"}, "epsilon"),
    ({"epsilon": "DIGITS5000"}, "JSON"),
    ({"continuous": "ranges"}, "continuous"),
    ({"continuous": [1, 2]}, "continuous"),
]


@pytest.mark.parametrize("change, word", ADMIN_INPUTS)
async def test_bad_admin_input_is_400_naming_it(service, change, word):  # noqa: F811
    import json

    spec = {**table_1_spec().to_dict(), **change}
    # Integers of 400 and 5000 digits, written into the text (json.dumps refuses the longer one).
    body = json.dumps({"spec": spec, "id": "c1"})
    body = body.replace('"DIGITS400"', "1" * 400).replace('"DIGITS5000"', "1" * 5000)
    async with service.session.post(
        f"{service.url}/collections", data=body, headers={**AUTH, "Content-Type": "application/json"}
    ) as r:
        assert r.status == 400 and word in (await r.json())["error"]


@pytest.mark.parametrize("min_reports", [2**63, 10**30, -1, 1.5])
async def test_min_reports_out_of_range_is_400(service, min_reports):  # noqa: F811
    import json

    body = json.dumps({"spec": table_1_spec().to_dict(), "min_reports": min_reports})
    async with service.session.post(
        f"{service.url}/collections", data=body, headers={**AUTH, "Content-Type": "application/json"}
    ) as r:
        assert r.status == 400 and "min_reports" in (await r.json())["error"]


async def test_deeply_nested_json_is_400(service):  # noqa: F811
    body = "[" * 30_000 + "]" * 30_000  # within the fixture's 64 KiB body limit
    async with service.session.post(
        f"{service.url}/collections", data=body, headers={**AUTH, "Content-Type": "application/json"}
    ) as r:
        assert r.status == 400


async def test_a_huge_domain_is_refused_before_anything_is_allocated(service):  # noqa: F811
    from participant import CollectionSpec, Feature

    # 6,000 categories × 200 classes: 1.2 million statistics entries in a 50 KB spec.
    spec = CollectionSpec([Feature("f", [str(i) for i in range(6000)])], [str(c) for c in range(200)], "OUE", 1.0)
    async with service.session.post(
        f"{service.url}/collections", data=msgpack.packb({"spec": spec.to_dict()}), headers={**AUTH, **MSGPACK}
    ) as r:
        assert r.status == 413 and "statistics entries" in (await r.json())["error"]


# 15-16. Conflicting resends, rate-limit settings, batch counts


async def test_the_same_id_with_another_value_is_a_conflict_and_the_first_is_kept(service):  # noqa: F811
    spec = table_1_spec(protocol="DE")
    await service.create(spec)
    first = {"id": b"k" * 16, "spec": spec.fingerprint_digest, "input": 1, "value": 2}
    assert (await service.post("/collections/c1/reports", msgpack.packb(first)))[0] == 201
    assert (await service.post("/collections/c1/reports", msgpack.packb(first))) == (200, {"status": "duplicate"})
    for other in ({**first, "value": 3}, {**first, "input": 2}):
        status, data = await service.post("/collections/c1/reports", msgpack.packb(other))
        assert status == 409 and data["reason"] == "conflict"
    status, data = await service.post("/collections/c1/reports", msgpack.packb({"reports": [first, {**first, "value": 4}]}))
    assert [r.get("reason", r["status"]) for r in data["results"]] == ["duplicate", "conflict"]
    collection = await service.collection()
    assert (await service.store.statistics(collection)).states[1].support[2] == 1
    async with service.session.get(f"{service.url}/metrics") as r:
        assert 'reason="conflict"} 3.0' in await r.text()


def test_a_negative_rate_limit_is_a_usage_error(tmp_path, capsys, monkeypatch):
    code, stderr = refusal(serve_command(tmp_path / "r.sqlite3", "--rate-limit", "-1")[3:], capsys, monkeypatch)
    assert code == 2 and "--rate-limit" in stderr and "Traceback" not in stderr


def test_a_billion_bins_is_a_spec_error_not_an_allocation():
    from participant.errors import SpecError
    from participant.spec import CollectionSpec

    continuous = {"inputs": [{"name": "x", "low": 0, "high": 1}], "bins": 10**9}
    with pytest.raises(SpecError, match="bins must be an integer from 2 to 10000"):
        CollectionSpec.from_dict({"classes": ["a", "b"], "protocol": "OUE", "epsilon": 1, "continuous": continuous})


# 7 and 14. Connections: timeouts, a cap, and JSON for what the HTTP parser refuses


async def raw(url: str, data: bytes, read: bool = True) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), 10) if read else b""
    writer.close()
    return answer


@pytest.fixture
async def limited(tmp_path):
    store, _ = await open_store(tmp_path / "limits.sqlite3", ADMIN)
    config = Config(keepalive_timeout=0.5, body_timeout=0.5, max_connections=8)
    runner, url = await start_site(await create_app(store, config))
    yield url
    await runner.cleanup()
    await store.close()


async def test_idle_and_slow_connections_are_closed(limited):
    host, port = limited.removeprefix("http://").split(":")
    # Idle: nothing sent at all.
    reader, writer = await asyncio.open_connection(host, int(port))
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()
    # Slow headers: a byte at a time, never finished.
    reader, writer = await asyncio.open_connection(host, int(port))
    closed_at = None
    for _ in range(40):
        try:
            writer.write(b"X")
            await writer.drain()
        except ConnectionError:
            closed_at = _
            break
        await asyncio.sleep(0.1)
        if reader.at_eof() or writer.transport.is_closing():
            closed_at = _
            break
    writer.close()
    assert closed_at is not None and closed_at < 30
    # Slow body: headers promise 1000 bytes, 10 arrive.
    answer = await raw(limited, b"POST /collections HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\nAuthorization: Bearer " + ADMIN.encode() + b"\r\n\r\n0123456789")
    assert b" 408 " in answer.split(b"\r\n")[0]


async def test_connections_beyond_the_cap_get_503_and_health_answers_after(limited):
    host, port = limited.removeprefix("http://").split(":")
    held = [await asyncio.open_connection(host, int(port)) for _ in range(8)]
    answer = await raw(limited, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 503") and b'"error"' in answer
    for _, writer in held:
        writer.close()
    await asyncio.sleep(0.2)
    assert b" 200 " in (await raw(limited, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).split(b"\r\n")[0]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"s3cr3t" * 3000 + b"\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01garbage not http\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nBad Header Line\r\n\r\n",
    ],
)
async def test_what_the_parser_refuses_is_answered_in_json_without_echo(limited, request_bytes, caplog):
    answer = await raw(limited, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1].startswith(b"4") and b"application/json" in head
    assert "error" in json.loads(body) and b"s3cr3t" not in answer
    assert "Traceback" not in caplog.text and "s3cr3t" not in caplog.text
