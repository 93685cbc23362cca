"""The embedded store: one SQLite file (mode 0600, WAL, every commit synced before it returns), for
one shuffler process, which holds it alone: in exclusive locking mode no other process opens the
file while the shuffler runs (its operator reads what waits through the service, ``GET /status``),
and SQLite keeps the log's index in this process's memory, never in a shared-memory file. Its
queries run on one worker thread of its own, in order.

Beside the guarantees of :mod:`.base`, this store keeps nothing of a released report in arrival
order on disk, and nothing of a forwarded report's bytes. Its report tables are keyed by digest
(``WITHOUT ROWID``), so a row's page says nothing of when it came; within a page SQLite lays rows
in the order they were written, which is why the released set is written at release, in each
batch's drawn order, and never at arrival. Deleted content is overwritten with zeros
(``secure_delete``, set here: builds differ in their default), and after every release, every
forwarded batch and every forgetting, whether or not the aggregator acknowledges
(:meth:`SQLiteStore.scrub`), the write-ahead log (pages in the order they were written: the digest
ranges people's reports fell in, one commit each, in arrival order) is copied into the database
and overwritten with zeros before SQLite removes it; a scrub that could not finish is tried again
every round until one does. A process that held the file open could keep the log, and its order,
from every scrub: none can while the shuffler runs. While reports wait, the log and the waiting table hold them in
arrival order (the shuffler sees their arrival anyway; it is the aggregator that must not); their
release zeroes them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import sqlite3
from contextlib import suppress
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from participant.spec import CollectionSpec
from participant.view import ShuffledView

from .base import Batch, Store, StoreUnavailable, split, today

SCHEMA = """
CREATE TABLE IF NOT EXISTS views (
    id TEXT PRIMARY KEY,
    uid TEXT NOT NULL,
    spec TEXT NOT NULL,
    min_batch INTEGER NOT NULL,
    dummies INTEGER NOT NULL,
    forwarded INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS seen (
    collection TEXT NOT NULL,
    digest BLOB NOT NULL,
    released INTEGER NOT NULL,
    PRIMARY KEY (collection, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS seen_released ON seen (released);
CREATE TABLE IF NOT EXISTS waiting (
    collection TEXT NOT NULL,
    digest BLOB NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (collection, digest)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    collection TEXT NOT NULL,
    people INTEGER NOT NULL,
    dummies INTEGER NOT NULL,
    padding INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS closed (collection TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batch_reports (
    batch INTEGER NOT NULL,
    position INTEGER NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (batch, position)
) WITHOUT ROWID;
"""


class Tables:
    """The file's tables, queried synchronously: :class:`SQLiteStore` calls them from one thread."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._connect()
        self._upgrade()
        self.db.executescript(SCHEMA)

    def _connect(self) -> None:
        """Open the file and take it for this process alone (see the module's text); a shared-memory
        index an earlier, non-exclusive, run left is zeroed and removed."""
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # Before the first access in WAL mode: the log's index then lives in this process's memory.
        self.db.execute("PRAGMA locking_mode=EXCLUSIVE")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA secure_delete=ON")  # deleted bytes overwritten with zeros
        try:
            self.db.execute("BEGIN IMMEDIATE")  # the file's lock, held from now on
            self.db.execute("COMMIT")
        except sqlite3.OperationalError:
            self.db.close()
            raise
        stale = Path(f"{self.path}-shm")
        with suppress(FileNotFoundError):
            fd = os.open(stale, os.O_WRONLY)
            try:
                _zero(fd)
            finally:
                os.close(fd)
            stale.unlink()

    def _upgrade(self) -> None:
        """Bring a file of the earlier layout up to this one. Its released set held people's
        digests alone, written at arrival: a re-post would tell a person's forwarded report from a
        dummy, and the rows' placement kept their arrival order. It is dropped (a retry of such a
        report is then taken again, as a dummy's re-post is) and the file rebuilt (VACUUM lays
        every table's rows in key order), then its log truncated."""
        columns = [row[1] for row in self.db.execute("PRAGMA table_info(seen)")]
        if not columns or "released" in columns:
            return
        self.db.execute("DROP TABLE seen")
        self.db.execute("VACUUM")
        self.scrub()

    def close(self) -> None:
        self.db.close()

    # views

    def view(self, collection_id: str) -> ShuffledView | None:
        """The view pinned for the collection, or None."""
        row = self.db.execute(
            "SELECT id, uid, spec, min_batch, dummies FROM views WHERE id = ?", (collection_id,)
        ).fetchone()
        if row is None:
            return None
        return ShuffledView(row[0], row[1], CollectionSpec.from_json(row[2]), row[3], row[4])

    def pin(self, view: ShuffledView) -> ShuffledView:
        """Pin ``view`` for its collection unless one is pinned already; the pinned view."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "INSERT OR IGNORE INTO views (id, uid, spec, min_batch, dummies) VALUES (?, ?, ?, ?, ?)",
                (view.collection, view.uid, json.dumps(view.spec.to_dict()), view.min_batch, view.dummies),
            )
        return self.view(view.collection)

    def views(self) -> list[ShuffledView]:
        """Every pinned view, in id order."""
        ids = [row[0] for row in self.db.execute("SELECT id FROM views ORDER BY id")]
        return [self.view(cid) for cid in ids]

    def forwarded_count(self, collection_id: str) -> int:
        """People's reports of the collection forwarded and acknowledged so far."""
        row = self.db.execute("SELECT forwarded FROM views WHERE id = ?", (collection_id,)).fetchone()
        return 0 if row is None else row[0]

    # reports

    def add(self, items: list[tuple[str, bytes]]) -> list[bool | None]:
        """Store every ``(collection, sealed)`` in one commit; for each, whether it is new (False:
        these very bytes wait already or were released; None: its collection is closed, nothing
        stored)."""
        new = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            closed = {row[0] for row in self.db.execute("SELECT collection FROM closed")}
            for collection, sealed in items:
                if collection in closed:
                    new.append(None)
                    continue
                digest = hashlib.sha256(sealed).digest()
                released = self.db.execute("SELECT 1 FROM seen WHERE collection = ? AND digest = ?", (collection, digest))
                if released.fetchone() is not None:
                    new.append(False)
                    continue
                insert = "INSERT OR IGNORE INTO waiting VALUES (?, ?, ?)"
                new.append(self.db.execute(insert, (collection, digest, sealed)).rowcount == 1)
        return new

    def waiting(self, collection_id: str) -> int:
        """Reports of the collection not yet in a batch."""
        (count,) = self.db.execute("SELECT COUNT(*) FROM waiting WHERE collection = ?", (collection_id,)).fetchone()
        return count

    def waiting_all(self) -> dict[str, int]:
        """Reports not yet in a batch, per collection with any."""
        return dict(self.db.execute("SELECT collection, COUNT(*) FROM waiting GROUP BY collection").fetchall())

    # batches

    def release(self, collection_id: str, floor: int, cap: int, dummies: list[list[bytes]], padding: int = 0) -> list[int]:
        """Draw batches of the collection's waiting reports, in one transaction: at most
        ``len(dummies)`` batches, each of at least ``floor`` and at most ``cap`` people's reports
        and the dummies ``dummies[b]``, in a uniformly random order; returns their ids (none when
        fewer than ``floor`` wait). Reports left out wait for the next release."""
        random = secrets.SystemRandom()
        drawn, day = [], today()
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute("SELECT digest, sealed FROM waiting WHERE collection = ?", (collection_id,)).fetchall()
            random.shuffle(rows)
            for b, (people, blanket) in enumerate(zip(split(rows, floor, cap, len(dummies)), dummies)):
                sealed = [s for _, s in people] + list(blanket)
                random.shuffle(sealed)
                batch = self.db.execute(
                    "INSERT INTO batches (name, collection, people, dummies, padding) VALUES (?, ?, ?, ?, ?)",
                    (secrets.token_hex(16), collection_id, len(people), len(blanket), padding if b == 0 else 0),
                ).lastrowid
                self.db.executemany(
                    "INSERT INTO batch_reports (batch, position, sealed) VALUES (?, ?, ?)",
                    ((batch, position, item) for position, item in enumerate(sealed)),
                )
                # People's and dummies' digests alike, in the drawn order (see the module's text).
                self.db.executemany(
                    "INSERT OR IGNORE INTO seen VALUES (?, ?, ?)",
                    ((collection_id, hashlib.sha256(item).digest(), day) for item in sealed),
                )
                self.db.executemany(
                    "DELETE FROM waiting WHERE collection = ? AND digest = ?", ((collection_id, digest) for digest, _ in people)
                )
                drawn.append(batch)
        return drawn

    def writable(self) -> None:
        """Raise ``sqlite3.OperationalError`` unless a write transaction could start now."""
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("ROLLBACK")

    def in_flight(self) -> list[tuple[int, str]]:
        """Every batch drawn and not yet acknowledged: ``(batch id, collection)``, oldest first."""
        return self.db.execute("SELECT id, collection FROM batches ORDER BY id").fetchall()

    def batch(self, batch: int) -> Batch | None:
        """A drawn batch, its sealed reports in their drawn order (None once acknowledged)."""
        row = self.db.execute("SELECT name, collection, people, dummies, padding FROM batches WHERE id = ?", (batch,)).fetchone()
        if row is None:
            return None
        name, collection, people, dummies, padding = row
        sealed = [row[0] for row in self.db.execute("SELECT sealed FROM batch_reports WHERE batch = ? ORDER BY position", (batch,))]
        return Batch(batch, name, collection, people, dummies, sealed, padding)

    def forwarded(self, batch: int) -> None:
        """The aggregator acknowledged ``batch``: it leaves the store (its digests stay released)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT collection, people FROM batches WHERE id = ?", (batch,)).fetchone()
            if row is None:
                return
            self.db.execute("DELETE FROM batch_reports WHERE batch = ?", (batch,))
            self.db.execute("DELETE FROM batches WHERE id = ?", (batch,))
            self.db.execute("UPDATE views SET forwarded = forwarded + ? WHERE id = ?", (row[1], row[0]))

    def close_collection(self, collection_id: str) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR IGNORE INTO closed VALUES (?)", (collection_id,))

    def closed(self, collection_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM closed WHERE collection = ?", (collection_id,)).fetchone() is not None

    def forget(self, collection_id: str) -> None:
        """Drop the collection's released set."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("DELETE FROM seen WHERE collection = ?", (collection_id,))

    def expire(self, before_day: int) -> int:
        """Drop every released digest of a release before ``before_day``; how many."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db.execute("DELETE FROM seen WHERE released < ?", (before_day,)).rowcount

    def scrub(self) -> None:
        """Leave nothing of the order pages were written in: copy the write-ahead log into the
        database, then close the connection, which removes the log (this process holds the file
        alone), overwriting it with zeros first through a descriptor of its own, and open it
        again. Raises ``sqlite3.OperationalError`` when it could not finish (the caller tries
        again: :attr:`SQLiteStore.unscrubbed`)."""
        busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        if busy:
            raise sqlite3.OperationalError("the log could not be copied into the database")
        kept = None
        with suppress(FileNotFoundError):
            kept = os.open(f"{self.path}-wal", os.O_WRONLY)
        try:
            self.db.close()
            if kept is not None:
                if os.path.exists(f"{self.path}-wal"):
                    raise sqlite3.OperationalError("the log was not removed when the store let go of it")
                _zero(kept)
        finally:
            if kept is not None:
                os.close(kept)
            self._connect()


def _zero(fd: int) -> None:
    """Overwrite the whole file open at ``fd`` with zeros, and sync it."""
    size, block = os.fstat(fd).st_size, bytes(1 << 16)
    os.lseek(fd, 0, os.SEEK_SET)
    for at in range(0, size, len(block)):
        os.write(fd, block[: min(len(block), size - at)])
    os.fsync(fd)


class SQLiteStore(Store):
    """The store in the file at ``path`` (created mode 0600)."""

    def __init__(self, path: str | os.PathLike):
        self.location = str(path)
        try:
            self.tables = Tables(path)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise StoreUnavailable(f"{path} is held by another process (a running shuffler holds its file alone)") from None
            raise StoreUnavailable(f"cannot open {path}: {exc}") from None
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open {path}: {exc}") from None
        self.unscrubbed = False
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="shuffler-store")

    async def _call(self, method: str, *args):
        function = getattr(self.tables, method)
        return await asyncio.get_running_loop().run_in_executor(self.worker, function, *args)

    async def shut(self) -> None:
        await self._call("close")
        self.worker.shutdown(wait=True)

    async def view(self, collection_id):
        return await self._call("view", collection_id)

    async def pin(self, view):
        return await self._call("pin", view)

    async def views(self):
        return await self._call("views")

    async def forwarded_count(self, collection_id):
        return await self._call("forwarded_count", collection_id)

    async def add(self, items):
        return await self._call("add", items)

    async def waiting(self, collection_id):
        return await self._call("waiting", collection_id)

    async def waiting_all(self):
        return await self._call("waiting_all")

    async def release(self, collection_id, floor, cap, dummies, padding=0):
        return await self._call("release", collection_id, floor, cap, dummies, padding)

    async def close(self, collection_id):
        return await self._call("close_collection", collection_id)

    async def closed(self, collection_id):
        return await self._call("closed", collection_id)

    async def forget(self, collection_id):
        return await self._call("forget", collection_id)

    async def expire(self, before_day):
        return await self._call("expire", before_day)

    async def writable(self):
        return await self._call("writable")

    async def in_flight(self):
        return await self._call("in_flight")

    async def batch(self, batch):
        return await self._call("batch", batch)

    async def forwarded(self, batch):
        return await self._call("forwarded", batch)

    async def scrub(self):
        """Copy the write-ahead log into the database, and leave nothing of it (:meth:`Tables.scrub`);
        one that fails is noted (:attr:`unscrubbed`) and tried again at the next round."""
        try:
            await self._call("scrub")
        except (sqlite3.Error, OSError) as exc:
            self.unscrubbed = True
            raise StoreUnavailable(f"the store's log could not be scrubbed: {exc}") from None
        self.unscrubbed = False
