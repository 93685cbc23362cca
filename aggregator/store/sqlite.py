"""The embedded store: one SQLite file (through the standard library's ``sqlite3``), for one service process.

Durability: WAL journal with ``synchronous=FULL``, so a committed transaction is on disk before
:meth:`SQLiteStore.ingest` returns. Queries run on the event loop's thread: a durable commit of a
few reports takes well under a millisecond, and a separate thread convoyed with the loop on the
GIL. A transaction of many reports (a large batch into a large collection held the loop 30 to
55 ms per 500 reports) runs on a worker thread instead, on a connection of its own: SQLite lets
go of the GIL while it works, so the loop serves other requests meanwhile. The file belongs to
one process: a second one would make this one wait on SQLite's lock with the loop blocked, so it
is refused at start (a lock file names the holder); several instances share PostgreSQL instead.

The file (and its WAL and shared-memory files, which SQLite creates with the file's mode) is
readable by its owner only: it holds the enrollment HMAC key.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np

from .base import (
    AFTER_BATCH_REPORTS,
    DUMMIES,
    NEW,
    SCHEMA_VERSION,
    TOKEN_USED,
    IncomingBatch,
    Store,
    StoreUnavailable,
    classify,
    failpoint,
)

log = logging.getLogger("ldpnb.aggregator")
# Transactions of more reports than this, or touching more statistics cells than THREAD_CELLS
# (a report over a domain of d adds to d cells: one OUE report into a collection of 10^6 entries
# is a million), run on a worker thread (see the module's note).
THREAD_FROM = 64
THREAD_CELLS = 20_000
READ_SLICE = 16_384  # statistics rows read between two releases of the GIL
LOCKED = "the database is locked by another process"
INSERT_REPORT = "INSERT OR IGNORE INTO reports (collection, report_id, input, value, received_at) VALUES (?, ?, ?, ?, ?)"
NOTE_BATCH = "INSERT OR IGNORE INTO shuffled_batches VALUES (?, ?, ?, ?, ?)"


class StoreLocked(Exception):
    """Another process has the SQLite file open."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds a lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    return getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


def _private_file(path: str) -> None:
    """Create ``path`` mode 0600 if missing; take group and other access away if present."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    for suffix in ("", "-wal", "-shm"):
        try:
            if os.stat(path + suffix).st_mode & 0o077:
                os.chmod(path + suffix, 0o600)
        except FileNotFoundError:
            pass


def _lock(path: str):
    """An exclusive lock on ``path.lock`` holding this process's id; raises :class:`StoreLocked`."""
    lock_path = path + ".lock"
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreLocked(
            f"{path} is in use by process {holder} (lock {lock_path}); one process serves a SQLite file: "
            "stop that one, or run several instances on PostgreSQL (--db postgresql://...)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


class SQLiteStore(Store):
    def __init__(self, path: str | Path, timeout: float = 5.0):
        super().__init__()
        self.timeout = timeout
        # The real path: a symlink to a file another process serves must meet that process's lock.
        self.path = self.location = os.path.realpath(str(path))
        self._lock_fd = _lock(self.path)
        try:
            _private_file(self.path)
            stat = os.stat(self.path)
            self._identity = (stat.st_dev, stat.st_ino)
            # Starting, the schema may wait its turn for a lock (up to the timeout); once serving,
            # no statement waits inside SQLite: a lock held elsewhere is waited for on the event
            # loop's clock (_unlocked), so that the loop never blocks on it.
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=timeout)
            self.db = conn
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            # Random report ids dirty random index pages; checkpointing the WAL less often (every
            # ~40 MB instead of ~4 MB) writes each hot page back once instead of many times.
            conn.execute("PRAGMA wal_autocheckpoint=10000")
            self._migrate()
            conn.execute("PRAGMA busy_timeout = 0")
            # Reports are written through a connection of their own (see the module's note).
            self._writes = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=0)
            self._writes.execute("PRAGMA synchronous=FULL")
            self._writes.execute("PRAGMA wal_autocheckpoint=10000")
            # Statistics are read through another, on a worker thread, one read at a time.
            self._reads = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._reading = threading.Lock()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._write_error: tuple[str, str] | None = None
        self._locked_until = 0.0  # monotonic time until which health reports a lock held elsewhere
        self._lock_waits = 0  # writes waiting now for a lock held elsewhere

    @classmethod
    async def open(cls, path: str | Path, timeout: float = 5.0) -> SQLiteStore:
        """The store at ``path``; ``timeout`` (seconds) bounds every wait for a lock another
        process holds, after which the write is refused (:class:`StoreUnavailable`)."""
        return cls(path, timeout)

    async def _unlocked(self, write, *args):
        """``write(*args)``, retried while another connection holds the database's write lock, on
        the event loop's clock (never inside SQLite, which would hold the loop), until most of
        :attr:`timeout` has passed: then :class:`StoreUnavailable` naming the lock (the request's
        own deadline, the whole timeout, comes after, so the client hears why)."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + 0.8 * self.timeout, 0.001
        while True:
            try:
                return await write(*args) if asyncio.iscoroutinefunction(write) else write(*args)
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                if loop.time() + pause > deadline:
                    self._locked_until = time.monotonic() + 2 * self.timeout
                    raise StoreUnavailable(LOCKED, f"{self.path} is locked: {exc}") from None
                self._lock_waits += 1
                try:
                    await asyncio.sleep(pause)
                finally:
                    self._lock_waits -= 1
                pause = min(2 * pause, 0.05)

    async def close(self) -> None:
        with self._reading:
            self._reads.close()
        self._writes.close()
        self.db.close()
        os.close(self._lock_fd)

    # schema

    def _migrate(self) -> None:
        """Create the schema, or bring a database of an earlier version to this one."""
        conn = self.db
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "settings" not in tables:
            conn.execute("CREATE TABLE [settings] ([key] TEXT PRIMARY KEY, [value] TEXT)")
        version = self._setting("schema_version")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} has schema version {version}; this ldpnb reads up to {SCHEMA_VERSION}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            if "collections" not in tables:
                conn.execute(
                    "CREATE TABLE collections (id TEXT PRIMARY KEY, spec TEXT NOT NULL, min_reports INTEGER, "
                    "created_at FLOAT, enrollment INTEGER, uid TEXT UNIQUE NOT NULL)"
                )
            elif version is None:
                # Version 1 had no globally unique identity; each collection gets one now.
                conn.execute("ALTER TABLE collections ADD COLUMN uid TEXT")
                for (rowid,) in conn.execute("SELECT rowid FROM collections").fetchall():
                    conn.execute("UPDATE collections SET uid = ? WHERE rowid = ?", (secrets.token_hex(16), rowid))
            if "reports" not in tables:
                conn.execute(
                    "CREATE TABLE reports (collection INTEGER NOT NULL, report_id BLOB NOT NULL, "
                    "input INTEGER NOT NULL, value NOT NULL, received_at REAL NOT NULL, "
                    "PRIMARY KEY (collection, report_id)) WITHOUT ROWID"
                )
            if "token_uses" not in tables:
                conn.execute(
                    "CREATE TABLE token_uses (collection INTEGER NOT NULL, nonce BLOB NOT NULL, "
                    "report_id BLOB NOT NULL, PRIMARY KEY (collection, nonce)) WITHOUT ROWID"
                )
            if "statistics" in tables and version is None:
                # Version 1 kept one row per (collection id, input); it becomes one instance's partials.
                conn.execute("ALTER TABLE statistics RENAME TO statistics_v1")
            if "partials" not in tables:
                conn.execute(
                    "CREATE TABLE partials (collection INTEGER NOT NULL, input INTEGER NOT NULL, "
                    "instance TEXT NOT NULL, n INTEGER NOT NULL, support BLOB NOT NULL, "
                    "PRIMARY KEY (collection, input, instance))"
                )
            if "statistics" in tables and version is None:
                conn.execute(
                    "INSERT INTO partials SELECT c.rowid, s.input, 'v1', s.n, s.support "
                    "FROM statistics_v1 s JOIN collections c ON c.id = s.collection_id"
                )
                conn.execute("DROP TABLE statistics_v1")
            if "partial_counts" not in tables:
                # Schema 3: an instance's partials as a count per input and a sum per cell (see
                # aggregator.store.base); the dense rows of `partials` stay, and are summed too.
                conn.execute(
                    "CREATE TABLE partial_counts (collection INTEGER NOT NULL, input INTEGER NOT NULL, "
                    "instance TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (collection, input, instance)) WITHOUT ROWID"
                )
                conn.execute(
                    "CREATE TABLE partial_cells (collection INTEGER NOT NULL, input INTEGER NOT NULL, "
                    "instance TEXT NOT NULL, cell INTEGER NOT NULL, value REAL NOT NULL, "
                    "PRIMARY KEY (collection, input, instance, cell)) WITHOUT ROWID"
                )
            if "shuffled_batches" not in tables:
                conn.execute(
                    "CREATE TABLE shuffled_batches (collection INTEGER NOT NULL, batch TEXT NOT NULL, size INTEGER "
                    "NOT NULL, dummies INTEGER NOT NULL, junk INTEGER NOT NULL, PRIMARY KEY (collection, batch)) WITHOUT ROWID"
                )
            conn.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # settings

    def _setting(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM settings WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    async def get_setting(self, key: str) -> str | None:
        return self._setting(key)

    async def set_setting(self, key: str, value: str, replace: bool = True) -> str:
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        await self._unlocked(self.db.execute, f"{verb} INTO settings (key, value) VALUES (?, ?)", [key, value])
        return self._setting(key)

    def _problem(self) -> tuple[str, str] | None:
        """``(public reason, detail naming the file)`` when the file cannot take writes, else None."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return "the database file was deleted while the service ran", f"{self.path} was deleted; restore it and restart"
        if (stat.st_dev, stat.st_ino) != self._identity:
            return "the database file was replaced while the service ran", f"{self.path} was replaced; restart the service"
        return self._write_error

    def held_elsewhere(self) -> str | None:
        if self._lock_waits or time.monotonic() < self._locked_until:
            return LOCKED
        return None

    async def health(self) -> str | None:
        problem = self._problem()
        if problem is None and self.held_elsewhere():
            problem = (LOCKED, f"{self.path} is locked by another process")
        if problem is None:
            return None
        log.warning("health check: %s", problem[1])
        return problem[0]

    def _check_writable(self) -> None:
        """Raise :class:`StoreUnavailable` unless the file this process opened is still in place."""
        problem = self._problem()
        if problem is not None and problem != self._write_error:
            raise StoreUnavailable(problem[0], problem[1])

    # collections

    async def _insert_collection(self, collection_id, uid, spec_json, min_reports, created_at, enrollment) -> int | None:
        self._check_writable()  # a collection written into a deleted file would vanish at restart
        try:
            cursor = await self._unlocked(
                self.db.execute,
                "INSERT INTO collections (id, uid, spec, min_reports, created_at, enrollment) VALUES (?, ?, ?, ?, ?, ?)",
                (collection_id, uid, spec_json, min_reports, created_at, int(enrollment)),
            )
        except sqlite3.IntegrityError:
            return None
        return cursor.lastrowid

    async def _collection_row(self, collection_id) -> dict | None:
        sql = "SELECT rowid AS key, id, uid, spec, min_reports, created_at, enrollment FROM collections WHERE id = ?"
        cursor = self.db.execute(sql, [collection_id])
        row = cursor.fetchone()
        return None if row is None else dict(zip([column[0] for column in cursor.description], row))

    async def _collection_ids(self, after="", limit=0) -> list[str]:
        rows = self.db.execute("SELECT id FROM collections WHERE id > ? ORDER BY id LIMIT ?", [after, limit or -1])
        return [row[0] for row in rows]

    # statistics

    async def _partial_rows(self, key: int):
        # A million cells are a second of row objects: read on a worker thread (SQLite lets go of
        # the GIL while it steps), on a connection of its own, in one read transaction so that
        # counts and cells are of the same commits.
        return await asyncio.to_thread(self._read_partials, key)

    def _read_partials(self, key: int):
        with self._reading:
            conn = self._reads
            conn.execute("BEGIN")
            try:
                counts = conn.execute(
                    "SELECT input, sum(n) FROM partial_counts WHERE collection = ? GROUP BY input", [key]
                ).fetchall()
                cursor = conn.execute(
                    "SELECT input, cell, sum(value) FROM partial_cells WHERE collection = ? "
                    "GROUP BY input, cell ORDER BY input, cell",
                    [key],
                )
                # A slice of rows at a time, as arrays, letting go of the GIL between slices: a
                # million rows fetched at once hold it (and the event loop's thread) for a second.
                chunks = []
                while chunk := cursor.fetchmany(READ_SLICE):
                    chunks.append(np.array(chunk, dtype=np.float64))
                    time.sleep(0)
                dense = conn.execute("SELECT input, n, support FROM partials WHERE collection = ?", [key]).fetchall()
            finally:
                conn.execute("COMMIT")
        cells = []
        if chunks:
            table = np.concatenate(chunks)
            inputs = table[:, 0].astype(np.int64)
            starts = np.flatnonzero(np.r_[True, inputs[1:] != inputs[:-1]])
            for start, end in zip(starts, [*starts[1:], len(table)]):
                cells.append((int(inputs[start]), table[start:end, 1].astype(np.int64), table[start:end, 2]))
        return counts, cells, dense

    async def counted(self, collection) -> int:
        sql = (
            "SELECT (SELECT coalesce(sum(n), 0) FROM partial_counts WHERE collection = ?) "
            "+ (SELECT coalesce(sum(n), 0) FROM partials WHERE collection = ?)"
        )
        return int(self.db.execute(sql, [collection.key, collection.key]).fetchone()[0])

    async def report_counts(self) -> dict[str, int]:
        rows = self.db.execute(
            "SELECT c.id, coalesce((SELECT sum(n) FROM partial_counts p WHERE p.collection = c.rowid), 0) "
            "+ coalesce((SELECT sum(n) FROM partials p WHERE p.collection = c.rowid), 0) FROM collections c"
        )
        return dict(rows.fetchall())

    async def dummy_counts(self) -> dict[str, float]:
        rows = self.db.execute(
            "SELECT c.id, sum(p.value) FROM partial_cells p JOIN collections c ON c.rowid = p.collection "
            "WHERE p.input = ? GROUP BY c.id", [DUMMIES],
        )  # fmt: skip
        return dict(rows.fetchall())

    async def count_reports(self, collection) -> int:
        return self.db.execute("SELECT count(*) FROM reports WHERE collection = ?", [collection.key]).fetchone()[0]

    async def record_batch(self, collection, batch: str, size: int, dummies: int, junk: int) -> bool:
        cursor = await self._unlocked(self.db.execute, NOTE_BATCH, (collection.key, batch, size, dummies, junk))
        return cursor.rowcount == 1

    async def batch_totals(self, collection) -> dict[str, int]:
        row = self.db.execute(
            "SELECT count(*), coalesce(sum(size), 0), coalesce(sum(dummies), 0), coalesce(sum(junk), 0), "
            "coalesce(min(size - dummies), 0) FROM shuffled_batches WHERE collection = ?",
            [collection.key],
        ).fetchone()
        return dict(zip(("batches", "reports", "dummies", "junk", "smallest"), map(int, row)))

    async def _stored_reports(self, key: int, input_index: int) -> list[tuple[bytes, object]]:
        sql = "SELECT report_id, value FROM reports WHERE collection = ? AND input = ?"
        return self.db.execute(sql, (key, input_index)).fetchall()

    async def _stored_values(self, key: int, input_index: int | None = None) -> list[tuple[int, object]]:
        sql = "SELECT input, value FROM reports WHERE collection = ?"
        args = [key]
        if input_index is not None:
            sql += " AND input = ?"
            args.append(input_index)
        return self.db.execute(sql + " ORDER BY received_at, report_id", args).fetchall()

    # reports

    async def _transaction(self, merged, notes):
        self._check_writable()

        reports = sum(len(batch) for batch in merged.values())
        cells = sum(len(batch) * self._cells_per_report(cid, i) for (cid, i), batch in merged.items())

        async def write():
            if reports > THREAD_FROM or cells > THREAD_CELLS:
                return await asyncio.to_thread(self._write, merged, notes)
            return self._write(merged, notes)

        return await self._unlocked(write)

    def _cells_per_report(self, collection_id: str, input_index: int) -> int:
        """The statistics cells one report of the input may add to: one for an index, its domain otherwise."""
        oracle = self._collections[collection_id].spec.oracles[input_index]
        return 1 if oracle.wire_kind == "index" else oracle.state_size

    def _write(self, merged, notes):
        """Insert every group's reports, write this instance's changed partials and the shuffled
        batches' rows, in one durable transaction on the writes' connection."""
        now = time.time()
        conn = self._writes
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                outcomes = self._insert_all_new(conn, merged, now)
                if outcomes is None:
                    outcomes = {
                        (cid, i): self._insert(conn, self._collections[cid].key, batch, now)
                        for (cid, i), batch in merged.items()
                    }
                updates = self._updated_partials(merged, outcomes)
                counts, cells = self._cell_rows(self.instance, updates)
                conn.executemany("INSERT OR REPLACE INTO partial_counts VALUES (?, ?, ?, ?)", counts)
                conn.executemany("INSERT OR REPLACE INTO partial_cells VALUES (?, ?, ?, ?, ?)", cells)
                noted = []
                if notes:
                    failpoint(AFTER_BATCH_REPORTS)
                    for note, row in self._batch_rows(notes, outcomes):
                        if conn.execute(NOTE_BATCH, row).rowcount == 1:
                            noted.append(note)
                    dummies = self._dummies_updates(noted)
                    _, cells = self._cell_rows(self.instance, dummies)
                    conn.executemany("INSERT OR REPLACE INTO partial_cells VALUES (?, ?, ?, ?, ?)", cells)
                    updates += dummies
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if _busy(exc):  # another process holds the lock: nothing stored; waited for by _unlocked
                raise
            # A full disk, an I/O error: nothing was stored. Health says so until a write succeeds.
            self._write_error = ("the database refused a write (disk full or failing)", f"{self.path}: {exc}")
            raise StoreUnavailable(*self._write_error) from None
        self._write_error = None
        self._locked_until = 0.0
        return outcomes, updates, noted

    def _insert_all_new(self, conn: sqlite3.Connection, merged, now: float) -> dict | None:
        """Every group's reports in one statement, if none carries a token and every one is new:
        their outcomes (all NEW); else None, with nothing inserted (a batch of a large collection
        spans hundreds of inputs, and a savepoint each cost more than the reports)."""
        if any(batch.tokens is not None for batch in merged.values()):
            return None
        rows = [
            (self._collections[cid].key, rid, i, v, now)
            for (cid, i), batch in merged.items()
            for rid, v in zip(batch.report_ids, batch.values)
        ]
        conn.execute("SAVEPOINT everything")
        before = conn.total_changes
        conn.executemany(INSERT_REPORT, rows)
        if conn.total_changes - before != len(rows):
            conn.execute("ROLLBACK TO everything")
            conn.execute("RELEASE everything")
            return None
        conn.execute("RELEASE everything")
        return {group: np.full(len(batch), NEW, dtype=np.int8) for group, batch in merged.items()}

    @staticmethod
    def _insert(conn: sqlite3.Connection, key: int, batch: IncomingBatch, now: float) -> np.ndarray:
        """Insert the batch's new reports; returns each report's outcome. Fast path: one
        executemany, right when every id is new and no token is involved; otherwise row by row."""
        rows = [(key, rid, batch.input, v, now) for rid, v in zip(batch.report_ids, batch.values)]
        conn.execute("SAVEPOINT batch")
        if batch.tokens is None:
            before = conn.total_changes
            conn.executemany(INSERT_REPORT, rows)
            if conn.total_changes - before == len(rows):
                conn.execute("RELEASE batch")
                return np.full(len(rows), NEW, dtype=np.int8)
            conn.execute("ROLLBACK TO batch")
        cursor = conn.cursor()
        inserted: set[bytes] = set()
        token_used: list[int] = []
        for j, row in enumerate(rows):
            if batch.tokens is not None:
                nonce = batch.tokens[j]
                used = cursor.execute(
                    "SELECT report_id FROM token_uses WHERE collection = ? AND nonce = ?", (key, nonce)
                ).fetchone()
                if used is not None and used[0] != row[1]:
                    token_used.append(j)
                    continue
            cursor.execute(INSERT_REPORT, row)
            if cursor.rowcount == 1:
                inserted.add(row[1])
                if batch.tokens is not None:
                    cursor.execute("INSERT INTO token_uses VALUES (?, ?, ?)", (key, batch.tokens[j], row[1]))
        others = [rid for rid in set(batch.report_ids) if rid not in inserted]
        stored = {}
        for start in range(0, len(others), 500):
            chunk = others[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for rid, i, value in cursor.execute(
                f"SELECT report_id, input, value FROM reports WHERE collection = ? AND report_id IN ({marks})",
                [key, *chunk],
            ):
                stored[rid] = (i, value)
        conn.execute("RELEASE batch")
        outcomes = classify(batch.report_ids, inserted, stored, batch.input, batch.values)
        outcomes[token_used] = TOKEN_USED
        return outcomes

