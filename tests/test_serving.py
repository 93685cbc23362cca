"""What a ``serve`` process sets for itself once its app is up: everything loaded at start frozen
out of the garbage collector's sight, and its young generation run every 10,000 allocations, not
700 (``aggregator/garbage.py``), seen in the real process's own Prometheus figures."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import aiohttp

from participant import Participant
from participant.wire import pack_report

from .conftest import table_1_spec
from .inprocess import run_main
from .servers import AUTH, MSGPACK, Server

REPORTS = 6_000


def passes(metrics: str) -> float:
    """The collector's passes so far, all generations."""
    return sum(float(n) for n in re.findall(r'python_gc_collections_total\{generation="\d"\} (\S+)', metrics))


async def test_a_serving_process_rarely_runs_the_garbage_collector(tmp_path):
    """6,000 single reports, 64 in flight: the collector ran 63 passes with CPython's defaults (one
    of them over the whole heap, modules included), and fewer than 10 as served. In bench/ingest.py's load
    such passes cost 6 µs of a report's 80 µs of CPU, and a whole-heap pass held the loop 23 ms."""
    spec = table_1_spec()
    participant = Participant(spec)
    record = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "No"}
    queue = [pack_report(participant.report(record), spec) for _ in range(REPORTS)]
    server = Server(tmp_path / "gc.sqlite3").start()
    try:
        async with aiohttp.ClientSession() as session:
            body = {"spec": spec.to_dict(), "id": "c"}
            async with session.post(f"{server.url}/collections", json=body, headers=AUTH) as r:
                assert r.status == 201
            async with session.get(f"{server.url}/metrics") as r:
                before = passes(await r.text())

            async def sender():
                while queue:
                    async with session.post(f"{server.url}/collections/c/reports", data=queue.pop(), headers=MSGPACK) as r:
                        assert r.status == 201

            await asyncio.gather(*(sender() for _ in range(64)))
            async with session.get(f"{server.url}/metrics") as r:
                during = passes(await r.text()) - before
    finally:
        server.stop()
    assert during < 10, during  # 63 with CPython's defaults


def serve(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """``python -m aggregator serve ARGS`` run to its end (a start that fails)."""
    return subprocess.run(
        [sys.executable, "-m", "aggregator", "serve", "--port", "0", *args],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "LDPNB_ADMIN_TOKEN": "serving-test-admin-token-0123456789", **(env or {})},
    )  # fmt: skip


def test_a_database_that_cannot_be_reached_at_start_is_one_line_naming_it_without_its_password(
    tmp_path, capsys, monkeypatch
):
    absent = serve("--db", f"postgresql://ldpnb:hunter2@/ledger?host={tmp_path}/nowhere", "--db-timeout", "2")
    assert absent.returncode == 2 and len(absent.stderr.strip().splitlines()) == 1, absent.stderr
    assert "cannot open the database postgresql://ldpnb:***@/ledger" in absent.stderr
    assert "nothing is listening there" in absent.stderr and "hunter2" not in absent.stderr
    # The address from a file or the environment: no password on the command line at all. What
    # these say is the command line's main() run in this process: the process is the one above.
    from aggregator.operator.cli import main

    monkeypatch.setenv("LDPNB_ADMIN_TOKEN", "serving-test-admin-token-0123456789")
    monkeypatch.delenv("LDPNB_DB", raising=False)

    def started(*args: str) -> subprocess.CompletedProcess:
        return run_main(main, capsys, "serve", "--port", "0", *args)

    address = tmp_path / "db.txt"
    address.write_text(f"postgresql://ldpnb:hunter2@/ledger?host={tmp_path}/nowhere\n")
    from_file = started("--db-file", str(address), "--db-timeout", "2")
    assert from_file.returncode == 2 and "ldpnb:***@/ledger" in from_file.stderr and "hunter2" not in from_file.stderr
    monkeypatch.setenv("LDPNB_DB", address.read_text().strip())
    from_env = started("--db-timeout", "2")
    assert from_env.returncode == 2 and "ldpnb:***@/ledger" in from_env.stderr
    monkeypatch.delenv("LDPNB_DB")
    both = started("--db", "x.sqlite3", "--db-file", str(address))
    assert both.returncode == 2 and "--db and --db-file name the database twice" in both.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "its first line should be the database address" in started("--db-file", str(empty)).stderr


def test_the_database_address_can_come_from_a_file(tmp_path):
    address = tmp_path / "db.txt"
    address.write_text(str(tmp_path / "from-file.sqlite3") + "\n")
    server = Server("unused", None, 1)
    server.command = lambda: [
        sys.executable, "-m", "aggregator", "serve", "--db-file", str(address), "--port", str(server.port),
    ]  # fmt: skip
    try:
        server.start()
        assert (tmp_path / "from-file.sqlite3").exists()
    finally:
        server.stop()


def test_sigterm_ends_the_service_in_seconds_while_models_its_clients_left_are_building(tmp_path):
    """Seventeen /model keys of a 998,002-entry collection asked by clients that leave at once (each a
    build of seconds, queued on the worker threads): SIGTERM ends the process within its request
    deadline and a few seconds, not after every build (more than 60 s before), exit code 0."""
    import json
    import socket
    import time
    import urllib.request

    from participant import CollectionSpec, Feature

    values = [f"v{i}" for i in range(1000)]
    spec = CollectionSpec([Feature(f"q{i}", values) for i in range(499)], ["a", "b"], "DE", 1.0)
    server = Server(tmp_path / "big.sqlite3").start()
    try:
        body = json.dumps({"spec": spec.to_dict(), "id": "big", "min_reports": 0}).encode()
        request = urllib.request.Request(f"{server.url}/collections", data=body, method="POST",
                                         headers={**AUTH, "Content-Type": "application/json"})  # fmt: skip
        urllib.request.urlopen(request, timeout=120).close()
        port = int(server.url.rsplit(":", 1)[1])
        from aggregator.estimation.smoothing import STRENGTHS

        keys = ["estimator=paper"] + [f"estimator={e}&strength={g:g}" for e in ("normsub", "ibu") for g in STRENGTHS]
        for key in keys:  # each a build of its own
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(f"GET /collections/big/model?{key} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(1.0)  # the builds are under way
        started = time.monotonic()
        server.proc.terminate()
        assert server.proc.wait(60) == 0
        assert time.monotonic() - started < 15
    finally:
        server.stop()
