"""The shuffler's store: one SQLite file (mode 0600, WAL, every commit synced before it returns).

Why nothing acknowledged is lost, counted twice, or released in a smaller batch:

- **A report is stored before it is acknowledged.** :meth:`ShufflerStore.add` commits the sealed
  bytes, keyed by (collection, SHA-256 of the bytes), before the device hears ``accepted``. A
  device re-sending the very same bytes (its retry after a lost answer), even after its batch
  left, finds the digest and hears ``duplicate``: one person's report is one row, so it never makes
  a batch look larger than its people.
- **Batches are drawn in one transaction.** :meth:`ShufflerStore.release` takes the reports
  waiting for a collection, only when there are at least its floor, splits them uniformly at
  random into batches of at least the floor each, adds to each the dummies drawn for it, puts
  every batch in a uniformly random order (the operating system's CSPRNG), writes the batches and
  deletes the reports from those waiting, all in one commit: after a crash a batch is whole or was
  never drawn.
- **A batch is deleted only once the aggregator acknowledged it.** Until then it is forwarded
  again at every round, the same reports in the same order under the same id: the aggregator
  counts each report id once, so a batch forwarded twice counts once.
- **The floor is the shuffler's to keep.** A collection's view (:mod:`shuffler.views`) is pinned
  once, and every release applies the larger of its floor and the shuffler's own; no request
  makes the shuffler release early.

What it keeps, and what it keeps nothing of: of a waiting report its collection, digest and sealed
bytes (``waiting``); of every report received its digest (``seen``, to recognise a re-send). No
address, header or time. Both tables are keyed by digest (``WITHOUT ROWID``), so a report's place
says nothing of when it came. Once released and forwarded, no report's bytes remain: deleted
content is overwritten with zeros (``secure_delete``, set here: builds differ in their default)
and the write-ahead log, which holds pages in the order they were written, is checkpointed and
truncated to nothing after every release and every forwarded batch (:meth:`ShufflerStore.scrub`).
While reports wait, the log holds them in arrival order (the shuffler sees their arrival anyway;
it is the aggregator that must not).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from participant.spec import CollectionSpec
from participant.view import ShuffledView

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
    PRIMARY KEY (collection, digest)
) WITHOUT ROWID;
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
    dummies INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS batch_reports (
    batch INTEGER NOT NULL,
    position INTEGER NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (batch, position)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Batch:
    """A drawn batch waiting for the aggregator's acknowledgement: its local ``id``, the ``name``
    the aggregator knows it by (random), its ``collection``, how many of its reports are
    ``people``'s and how many ``dummies``, and its sealed reports in their drawn order."""

    id: int
    name: str
    collection: str
    people: int
    dummies: int
    sealed: list[bytes]


def split(rows: list, floor: int, cap: int, batches: int) -> list[list]:
    """``rows`` (already in a uniformly random order) cut into at most ``batches`` consecutive
    batches of near-equal size, each of at least ``floor`` and at most ``cap`` rows; the rows that
    do not fit stay out. Empty when fewer than ``floor`` rows or ``cap < floor``."""
    waiting = len(rows)
    if waiting < floor or cap < floor:
        return []
    count = max(1, min(batches, math.ceil(waiting / cap), waiting // floor))
    taken = min(waiting, count * cap)
    edges = [round(b * taken / count) for b in range(count + 1)]
    return [rows[edges[b] : edges[b + 1]] for b in range(count)]


class ShufflerStore:
    """The store at ``path`` (created mode 0600). Not thread-safe: the service calls it from one
    worker thread."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA secure_delete=ON")  # deleted bytes overwritten with zeros
        self.db.executescript(SCHEMA)

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

    def add(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """Store every ``(collection, sealed)`` in one commit; for each, whether it is new (False:
        these very bytes were received before)."""
        new = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            for collection, sealed in items:
                digest = hashlib.sha256(sealed).digest()
                fresh = self.db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (collection, digest)).rowcount == 1
                if fresh:
                    self.db.execute("INSERT INTO waiting VALUES (?, ?, ?)", (collection, digest, sealed))
                new.append(fresh)
        return new

    def waiting(self, collection_id: str) -> int:
        """Reports of the collection not yet in a batch."""
        (count,) = self.db.execute("SELECT COUNT(*) FROM waiting WHERE collection = ?", (collection_id,)).fetchone()
        return count

    def waiting_all(self) -> dict[str, int]:
        """Reports not yet in a batch, per collection with any."""
        return dict(self.db.execute("SELECT collection, COUNT(*) FROM waiting GROUP BY collection").fetchall())

    # batches

    def release(self, collection_id: str, floor: int, cap: int, dummies: list[list[bytes]]) -> list[int]:
        """Draw batches of the collection's waiting reports, in one transaction: at most
        ``len(dummies)`` batches, each of at least ``floor`` and at most ``cap`` people's reports
        and the dummies ``dummies[b]``, in a uniformly random order; returns their ids (none when
        fewer than ``floor`` wait). Reports left out wait for the next release."""
        random = secrets.SystemRandom()
        drawn = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute("SELECT digest, sealed FROM waiting WHERE collection = ?", (collection_id,)).fetchall()
            random.shuffle(rows)
            for people, blanket in zip(split(rows, floor, cap, len(dummies)), dummies):
                sealed = [s for _, s in people] + list(blanket)
                random.shuffle(sealed)
                batch = self.db.execute(
                    "INSERT INTO batches (name, collection, people, dummies) VALUES (?, ?, ?, ?)",
                    (secrets.token_hex(16), collection_id, len(people), len(blanket)),
                ).lastrowid
                self.db.executemany(
                    "INSERT INTO batch_reports (batch, position, sealed) VALUES (?, ?, ?)",
                    ((batch, position, item) for position, item in enumerate(sealed)),
                )
                self.db.executemany(
                    "DELETE FROM waiting WHERE collection = ? AND digest = ?", ((collection_id, digest) for digest, _ in people)
                )
                drawn.append(batch)
        return drawn

    def in_flight(self, collection_id: str | None = None) -> list[tuple[int, str]]:
        """Every batch drawn and not yet acknowledged (of one collection if given): ``(batch id,
        collection)``, oldest first."""
        if collection_id is None:
            return self.db.execute("SELECT id, collection FROM batches ORDER BY id").fetchall()
        return self.db.execute("SELECT id, collection FROM batches WHERE collection = ? ORDER BY id", (collection_id,)).fetchall()

    def batch(self, batch: int) -> Batch:
        """A drawn batch, its sealed reports in their drawn order."""
        name, collection, people, dummies = self.db.execute(
            "SELECT name, collection, people, dummies FROM batches WHERE id = ?", (batch,)
        ).fetchone()
        sealed = [row[0] for row in self.db.execute("SELECT sealed FROM batch_reports WHERE batch = ? ORDER BY position", (batch,))]
        return Batch(batch, name, collection, people, dummies, sealed)

    def forwarded(self, batch: int) -> None:
        """The aggregator acknowledged ``batch``: it leaves the store (its people's digests stay)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT collection, people FROM batches WHERE id = ?", (batch,)).fetchone()
            if row is None:
                return
            self.db.execute("DELETE FROM batch_reports WHERE batch = ?", (batch,))
            self.db.execute("DELETE FROM batches WHERE id = ?", (batch,))
            self.db.execute("UPDATE views SET forwarded = forwarded + ? WHERE id = ?", (row[1], row[0]))

    def scrub(self) -> None:
        """Copy the write-ahead log into the database and truncate it to nothing: the log holds
        pages in the order they were written, the database in key order."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
