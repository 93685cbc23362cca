"""Moving a SQLite database into PostgreSQL: everything arrives, statistics equal a recomputation,
and the service on PostgreSQL answers as it did on SQLite."""

import asyncio
import subprocess
import sys

import numpy as np

from aggregator.service.app import open_store
from aggregator.store import IncomingBatch
from participant import Participant
from participant.wire import report_to_wire

from .conftest import TABLE_1, fresh_postgres_url, table_1_spec
from .servers import ADMIN

RECORDS = [dict(zip(["age", "income", "gender", "missed_payment"], row)) for row in TABLE_1]


def batches_of(collection, reports) -> list[IncomingBatch]:
    """``reports`` as the store takes them, one batch per input (with a token each if the
    collection has enrollment)."""
    batches = []
    for i in range(collection.spec.n_inputs):
        mine = [r for r in reports if r.input == i]
        wires = [report_to_wire(r, collection.spec) for r in mine]
        tokens = [bytes([i, j]) * 8 for j in range(len(mine))] if collection.enrollment else None
        batches.append(
            IncomingBatch(
                collection.id,
                i,
                [w["id"] for w in wires],
                [w["value"] for w in wires],
                np.array([r.payload for r in mine]),
                tokens,
            )
        )
    return batches


async def fill(path):
    """A SQLite database with two collections (one with enrollment) and their reports."""
    store, _ = await open_store(path, ADMIN)
    try:
        for cid, protocol, enrollment in (("plain", "OUE", False), ("enrolled", "DE", True)):
            spec = table_1_spec(protocol=protocol)
            collection = await store.create_collection(cid, spec, 5, enrollment)
            participant = Participant(spec, rng=np.random.default_rng(1))
            await store.ingest(batches_of(collection, [participant.report(r) for r in RECORDS * 20]))
        return {c.id: await store.statistics(c) for c in await store.list_collections()}
    finally:
        await store.close()


async def test_copy_moves_everything_and_statistics_equal_a_recomputation(tmp_path, postgres):
    source = str(tmp_path / "source.sqlite3")
    before = await fill(source)
    target = fresh_postgres_url(postgres)
    result = await copy(source, target)
    assert result.returncode == 0, result.stderr
    assert "copied 2 collections, 400 reports" in result.stdout
    store, _ = await open_store(target, ADMIN)  # the admin token's hash came along
    try:
        for collection in await store.list_collections():
            stats = await store.statistics(collection)
            recomputed = await store.recompute_statistics(collection)
            assert stats.n_reports == before[collection.id].n_reports == await store.count_reports(collection)
            for a, b, c in zip(stats.states, recomputed.states, before[collection.id].states):
                np.testing.assert_array_equal(a.support, b.support)
                np.testing.assert_array_equal(a.support, c.support)
        # Reports after the copy are counted per cell, on top of the copied rows.
        plain = await store.collection("plain")
        participant = Participant(plain.spec, rng=np.random.default_rng(2))
        await store.ingest(batches_of(plain, [participant.report(r) for r in RECORDS * 5]))
        stats, recomputed = await store.statistics(plain), await store.recompute_statistics(plain)
        assert stats.n_reports == recomputed.n_reports == 250
        for a, b in zip(stats.states, recomputed.states):
            np.testing.assert_array_equal(a.support, b.support)
        source_store, _ = await open_store(source)
        try:
            for old in await source_store.list_collections():
                new = await store.collection(old.id)
                assert (new.uid, new.spec, new.min_reports, new.enrollment) == (
                    old.uid,
                    old.spec,
                    old.min_reports,
                    old.enrollment,
                )
        finally:
            await source_store.close()
    finally:
        await store.close()
    # A second copy would duplicate the collections: refused, in one line, nothing written.
    again = await copy(source, target)
    assert again.returncode == 2 and "already holds collections" in again.stderr and "Traceback" not in again.stderr


async def test_a_version_1_sqlite_database_is_migrated_at_start(tmp_path):
    """The first release's layout: one statistics row per (collection id, input), no uid."""
    import json
    import sqlite3

    path = tmp_path / "v1.sqlite3"
    spec = table_1_spec(protocol="DE")
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE collections (id TEXT PRIMARY KEY, spec TEXT NOT NULL, min_reports INTEGER,
            created_at FLOAT, enrollment INTEGER);
        CREATE TABLE reports (collection INTEGER NOT NULL, report_id BLOB NOT NULL, input INTEGER NOT NULL,
            value NOT NULL, received_at REAL NOT NULL, PRIMARY KEY (collection, report_id)) WITHOUT ROWID;
        CREATE TABLE token_uses (collection INTEGER NOT NULL, nonce BLOB NOT NULL, report_id BLOB NOT NULL,
            PRIMARY KEY (collection, nonce)) WITHOUT ROWID;
        CREATE TABLE statistics (collection_id TEXT NOT NULL REFERENCES collections(id), input INTEGER NOT NULL,
            n INTEGER NOT NULL, support BLOB NOT NULL, PRIMARY KEY (collection_id, input));
        """
    )
    conn.execute("INSERT INTO collections VALUES ('old', ?, 0, 1.0, 0)", [json.dumps(spec.to_dict())])
    values = [0, 1, 1, 5]
    for j, v in enumerate(values):
        conn.execute("INSERT INTO reports VALUES (1, ?, 1, ?, 1.0)", [bytes([j]) * 16, v])
    support = np.bincount(values, minlength=6).astype(float)
    conn.execute("INSERT INTO statistics VALUES ('old', 1, 4, ?)", [support.tobytes()])
    conn.execute("INSERT INTO statistics VALUES ('old', 0, 0, ?)", [np.zeros(2).tobytes()])
    conn.commit()
    conn.close()
    store, _ = await open_store(path, ADMIN)
    try:
        collection = await store.collection("old")
        assert len(collection.uid) == 32
        stats = await store.statistics(collection)
        np.testing.assert_array_equal(stats.states[1].support, support)
        recomputed = await store.recompute_statistics(collection)
        np.testing.assert_array_equal(recomputed.states[1].support, support)
    finally:
        await store.close()


def copy_process(source, target, *extra: str) -> subprocess.CompletedProcess:
    """``python -m aggregator copy`` as its own process."""
    command = [sys.executable, "-m", "aggregator", "copy", "--from", str(source), "--to", target, *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


async def copy(source, target, *extra: str) -> subprocess.CompletedProcess:
    """``python -m aggregator copy`` through the command line's main() in this process, on a thread
    of its own (it runs its own event loop): what it prints and its exit status."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from aggregator.operator.cli import main

    def run() -> subprocess.CompletedProcess:
        argv = ["copy", "--from", str(source), "--to", target, *extra]
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit:
                code = exit.code
        return subprocess.CompletedProcess(argv, code or 0, out.getvalue(), err.getvalue())

    return await asyncio.to_thread(run)


async def started_once(url: str, token: str) -> None:
    """What a service's start leaves in the database at ``url`` (its settings: ``serve`` opens it
    with :func:`open_store` before it listens), without a process."""
    store, _ = await open_store(url, token)
    await store.close()


def admin_status(server, token: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{server.url}/collections", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


async def test_the_postgresql_guides_commands_leave_the_operator_with_the_token_they_exported(tmp_path, postgres):
    """docs/guides/postgresql.md, in its order: a new token exported, the SQLite file copied into a
    database no service has started on, then serve with --rotate-admin-token: the new token is the
    admin's, the file's is refused. Started the other way round (a service on the target first),
    the copy is refused in one line naming both choices, nothing copied; keeping the target's
    settings is refused while a copied collection needs the file's enrollment key, and works
    without one; taking the file's says so."""
    import secrets

    from .servers import Server

    source = tmp_path / "ldpnb.sqlite3"
    await fill(str(source))
    exported = secrets.token_urlsafe(32)
    target = fresh_postgres_url(postgres)
    done = await copy(source, target)
    assert done.returncode == 0 and "copied 2 collections" in done.stdout and "replaced" not in done.stdout, done.stderr
    server = Server(target, None, 1, "--rotate-admin-token", admin=exported).start()
    try:
        assert admin_status(server, exported) == 200 and admin_status(server, ADMIN) == 403
    finally:
        server.stop()

    started = fresh_postgres_url(postgres)
    await started_once(started, exported)  # a service ran on the target: it has settings of its own
    refused = await copy(source, started)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "its admin token" in refused.stderr and "--keep-target-settings" in refused.stderr and "--take-source-settings" in refused.stderr
    kept = await copy(source, started, "--keep-target-settings")
    assert kept.returncode == 2 and "enrolled" in kept.stderr and "enrollment key" in kept.stderr, kept.stderr
    store, _ = await open_store(started, exported)  # nothing was copied: the exported token still opens it
    try:
        assert await store.list_collections() == []
    finally:
        await store.close()
    taken = await copy(source, started, "--take-source-settings")
    assert taken.returncode == 0 and "(the file's admin token, enrollment key replaced the target's)" in taken.stdout

    plain = tmp_path / "plain.sqlite3"
    store, _ = await open_store(str(plain), ADMIN)
    try:
        await store.create_collection("plain", table_1_spec(), 5, False)
    finally:
        await store.close()
    other = fresh_postgres_url(postgres)
    await started_once(other, exported)
    assert (await copy(plain, other, "--keep-target-settings")).returncode == 0
    server = Server(other, admin=exported).start()
    try:
        assert admin_status(server, exported) == 200 and admin_status(server, ADMIN) == 403
    finally:
        server.stop()


def test_the_postgresql_guides_trial_database_starts_takes_the_copy_before_any_serve_and_stops(tmp_path):
    """Issue 81: the guide started `serve` before `copy` (refused: a service had started on the
    target) and never said how to stop the pgserver database. Its lines, as written, in a
    directory of their own: the database starts at the address the guide exports, the SQLite file
    is copied before any service starts on it, and the guide's last line stops it."""
    import asyncio
    import re
    import shutil
    import tempfile
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "postgresql.md").read_text()
    assert page.index("aggregator copy --from") < page.index("--rotate-admin-token")
    start, stop = re.findall(r'^python -c "(import pgserver; .*)"$', page, re.M)
    exported = re.search(r"^export LDPNB_DB='([^']+)'", page, re.M).group(1)
    directory = tempfile.mkdtemp(prefix="pg", dir="/tmp")  # a socket's path is short
    try:
        started = subprocess.run(
            [sys.executable, "-c", start.replace("/tmp/ldpnb-pg", directory)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr[-2000:]
        url = exported.replace("/tmp/ldpnb-pg", directory)
        assert started.stdout.strip() == url
        assert (Path(directory) / "postmaster.pid").exists()  # running after the command returned
        source = tmp_path / "ldpnb.sqlite3"
        asyncio.run(fill(str(source)))
        done = copy_process(source, url)  # the entry point, as its own process
        assert done.returncode == 0 and "copied 2 collections" in done.stdout, done.stderr
        stopped = subprocess.run(
            [sys.executable, "-c", stop.replace("/tmp/ldpnb-pg", directory)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr[-2000:]
        assert not (Path(directory) / "postmaster.pid").exists()
    finally:
        subprocess.run(
            [sys.executable, "-c", f"import pgserver; pgserver.get_server({directory!r}, cleanup_mode='delete')"],
            capture_output=True, timeout=120,
        )  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)
