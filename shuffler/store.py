"""The shuffler's store: one SQLite file (mode 0600, WAL, every commit synced before it returns).

Why nothing acknowledged is lost, counted twice, or released in a smaller batch:

- **A report is stored before it is acknowledged.** ``add`` commits the sealed bytes, keyed by
  (collection, SHA-256 of the bytes), before the device hears ``accepted``. A device re-sending the
  very same bytes (its retry after a lost answer) finds the key and hears ``duplicate``: one
  person's report is one row, so it never makes a batch look larger than its people.
- **A batch is drawn in one transaction.** ``release`` takes every report waiting for a
  collection, only when there are at least its ``min_batch``, puts them in a uniformly random
  order (the operating system's CSPRNG), writes that order as the batch and empties the reports'
  bytes, all in one commit: after a crash the batch is whole or was never drawn.
- **A batch is deleted only once the aggregator acknowledged it.** Until then it is forwarded
  again at every round, the same reports in the same order: the aggregator counts each report id
  once, so a batch forwarded twice (its answer lost, or the shuffler killed after the aggregator
  counted it) counts once.
- **The minimum is the shuffler's to keep.** A collection's ``min_batch`` is pinned when the
  shuffler first sees the collection (the larger of its spec's and the shuffler's own floor) and
  nothing the aggregator sends changes it; no request makes the shuffler release early.

What it keeps of a report: its collection, digest and sealed bytes, and once forwarded the digest
alone (to recognise a re-send). No address, header or time: the reports table is keyed by digest
(``WITHOUT ROWID``), so not even the order of arrival is kept.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    min_batch INTEGER NOT NULL,
    sealed_length INTEGER NOT NULL,
    forwarded INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS reports (
    collection TEXT NOT NULL,
    digest BLOB NOT NULL,
    sealed BLOB,
    PRIMARY KEY (collection, digest)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (id INTEGER PRIMARY KEY, collection TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batch_reports (
    batch INTEGER NOT NULL,
    position INTEGER NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (batch, position)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Pinned:
    """What the shuffler holds a collection to: the spec ``fingerprint`` it first saw, the batch
    floor ``min_batch``, the one ``sealed_length`` its reports have, and how many it ``forwarded``."""

    id: str
    fingerprint: str
    min_batch: int
    sealed_length: int
    forwarded: int = 0


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
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def collection(self, collection_id: str) -> Pinned | None:
        row = self.db.execute("SELECT * FROM collections WHERE id = ?", (collection_id,)).fetchone()
        return None if row is None else Pinned(*row)

    def pin(self, pinned: Pinned) -> Pinned:
        """Hold ``pinned``'s collection to it, unless already pinned (then what was pinned first)."""
        self.db.execute(
            "INSERT OR IGNORE INTO collections (id, fingerprint, min_batch, sealed_length) VALUES (?, ?, ?, ?)",
            (pinned.id, pinned.fingerprint, pinned.min_batch, pinned.sealed_length),
        )
        return self.collection(pinned.id)

    def add(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """Store every ``(collection, sealed)`` in one commit; for each, whether it is new (False:
        these very bytes were received before)."""
        new = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            for collection, sealed in items:
                cursor = self.db.execute(
                    "INSERT OR IGNORE INTO reports (collection, digest, sealed) VALUES (?, ?, ?)",
                    (collection, hashlib.sha256(sealed).digest(), sealed),
                )
                new.append(cursor.rowcount == 1)
        return new

    def waiting(self, collection_id: str) -> int:
        """Reports of the collection not yet in a batch."""
        (count,) = self.db.execute(
            "SELECT COUNT(*) FROM reports WHERE collection = ? AND sealed IS NOT NULL", (collection_id,)
        ).fetchone()
        return count

    def release(self, collection_id: str) -> int | None:
        """Draw a batch of every waiting report of the collection, in a uniformly random order, if
        there are at least its ``min_batch``; returns the batch's id, or None."""
        pinned = self.collection(collection_id)
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute(
                "SELECT digest, sealed FROM reports WHERE collection = ? AND sealed IS NOT NULL", (collection_id,)
            ).fetchall()
            if pinned is None or len(rows) < pinned.min_batch:
                return None
            secrets.SystemRandom().shuffle(rows)
            batch = self.db.execute("INSERT INTO batches (collection) VALUES (?)", (collection_id,)).lastrowid
            self.db.executemany(
                "INSERT INTO batch_reports (batch, position, sealed) VALUES (?, ?, ?)",
                ((batch, position, sealed) for position, (_, sealed) in enumerate(rows)),
            )
            self.db.executemany(
                "UPDATE reports SET sealed = NULL WHERE collection = ? AND digest = ?",
                ((collection_id, digest) for digest, _ in rows),
            )
        return batch

    def ready(self) -> list[str]:
        """Collections with at least their ``min_batch`` reports waiting."""
        return [
            row[0]
            for row in self.db.execute(
                "SELECT c.id FROM collections c WHERE c.min_batch <= "
                "(SELECT COUNT(*) FROM reports r WHERE r.collection = c.id AND r.sealed IS NOT NULL)"
            )
        ]

    def in_flight(self) -> list[tuple[int, str]]:
        """Every batch drawn and not yet acknowledged: ``(batch id, collection)``, oldest first."""
        return self.db.execute("SELECT id, collection FROM batches ORDER BY id").fetchall()

    def batch(self, batch: int) -> list[bytes]:
        """A batch's sealed reports in their drawn order."""
        return [row[0] for row in self.db.execute("SELECT sealed FROM batch_reports WHERE batch = ? ORDER BY position", (batch,))]

    def forwarded(self, batch: int) -> None:
        """The aggregator acknowledged ``batch``: it leaves the store (its reports' digests stay)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT collection FROM batches WHERE id = ?", (batch,)).fetchone()
            if row is None:
                return
            (count,) = self.db.execute("SELECT COUNT(*) FROM batch_reports WHERE batch = ?", (batch,)).fetchone()
            self.db.execute("DELETE FROM batch_reports WHERE batch = ?", (batch,))
            self.db.execute("DELETE FROM batches WHERE id = ?", (batch,))
            self.db.execute("UPDATE collections SET forwarded = forwarded + ? WHERE id = ?", (count, row[0]))
