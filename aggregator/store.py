"""SQLite persistence (through sqlite-utils): collections, reports and running statistics.

Durability: WAL journal with ``synchronous=FULL``, so a committed transaction is on disk before
:meth:`Store.ingest` returns. Each ingest stores the new reports and updates the collection's
running statistics in the same transaction; a report id already stored for the collection is
reported as a duplicate and counted nowhere.

A Store is used from one thread at a time (the service runs every call on one worker thread).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlite_utils import Database

from participant.spec import CollectionSpec
from participant.wire import decode_values
from protocols import OracleState

from .statistics import CollectionStatistics

NEW, DUPLICATE, TOKEN_USED = 1, 0, -1


class CollectionExists(Exception):
    """A collection with that id already exists (specs are immutable)."""


@dataclass(frozen=True)
class Collection:
    """A created collection: its immutable spec and release threshold."""

    id: str
    spec: CollectionSpec
    min_reports: int
    created_at: float
    key: int = 0  # the collections table's rowid: reports are keyed by it, a short integer
    enrollment: bool = False  # reports must carry a single-use enrollment token

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "spec": self.spec.to_dict(),
            "min_reports": self.min_reports,
            "created_at": self.created_at,
            "enrollment": self.enrollment,
        }


@dataclass(frozen=True)
class IncomingBatch:
    """Validated reports of one collection, all carrying the same input, waiting to be stored:
    their ids, their wire values (stored as received) and their decoded rows (for the statistics)."""

    collection_id: str
    input: int
    report_ids: list[bytes]
    values: list
    rows: np.ndarray
    tokens: list[bytes] | None = None  # enrollment token nonces, one per report

    def __len__(self) -> int:
        return len(self.report_ids)


class Store:
    def __init__(self, path: str | Path):
        self.path = str(path)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db = Database(conn)
        self.db.enable_wal()
        conn.execute("PRAGMA synchronous=FULL")
        # Random report ids dirty random index pages; checkpointing the WAL less often (every
        # ~40 MB instead of ~4 MB) writes each hot page back once instead of many times.
        conn.execute("PRAGMA wal_autocheckpoint=10000")
        self._create_schema()
        self.collections: dict[str, Collection] = {}
        self.statistics: dict[str, CollectionStatistics] = {}
        for row in self.db.query("SELECT rowid AS key, * FROM collections"):
            collection = self._collection_from_row(row)
            self.collections[collection.id] = collection
            self.statistics[collection.id] = self._load_statistics(collection)

    def close(self) -> None:
        self.db.conn.close()

    def _create_schema(self) -> None:
        db = self.db
        if "settings" not in db.table_names():
            db["settings"].create({"key": str, "value": str}, pk="key")
        if "collections" not in db.table_names():
            db["collections"].create(
                {"id": str, "spec": str, "min_reports": int, "created_at": float, "enrollment": int},
                pk="id",
                not_null={"spec"},
            )
        if "reports" not in db.table_names():
            db.execute(
                "CREATE TABLE reports (collection INTEGER NOT NULL, "
                "report_id BLOB NOT NULL, input INTEGER NOT NULL, value NOT NULL, received_at REAL NOT NULL, "
                "PRIMARY KEY (collection, report_id)) WITHOUT ROWID"
            )
        if "token_uses" not in db.table_names():
            db.execute(
                "CREATE TABLE token_uses (collection INTEGER NOT NULL, nonce BLOB NOT NULL, report_id BLOB NOT NULL, "
                "PRIMARY KEY (collection, nonce)) WITHOUT ROWID"
            )
        if "statistics" not in db.table_names():
            db.execute(
                "CREATE TABLE statistics (collection_id TEXT NOT NULL REFERENCES collections(id), "
                "input INTEGER NOT NULL, n INTEGER NOT NULL, support BLOB NOT NULL, "
                "PRIMARY KEY (collection_id, input))"
            )

    # settings

    def get_setting(self, key: str) -> str | None:
        rows = list(self.db.query("SELECT value FROM settings WHERE key = ?", [key]))
        return rows[0]["value"] if rows else None

    def set_setting(self, key: str, value: str) -> None:
        self.db["settings"].upsert({"key": key, "value": value}, pk="key")

    # collections

    @staticmethod
    def _collection_from_row(row) -> Collection:
        return Collection(
            row["id"],
            CollectionSpec.from_json(row["spec"]),
            row["min_reports"],
            row["created_at"],
            row["key"],
            bool(row["enrollment"]),
        )

    def create_collection(
        self, collection_id: str, spec: CollectionSpec, min_reports: int, enrollment: bool = False
    ) -> Collection:
        """Store a new collection with empty statistics; raises :class:`CollectionExists`."""
        if collection_id in self.collections:
            raise CollectionExists(collection_id)
        created_at = time.time()
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.execute(
                "INSERT INTO collections (id, spec, min_reports, created_at, enrollment) VALUES (?, ?, ?, ?, ?)",
                (collection_id, json.dumps(spec.to_dict()), int(min_reports), created_at, int(enrollment)),
            )
            collection = Collection(
                collection_id, spec, int(min_reports), created_at, cursor.lastrowid, bool(enrollment)
            )
            conn.executemany(
                "INSERT INTO statistics (collection_id, input, n, support) VALUES (?, ?, 0, ?)",
                [(collection_id, i, np.zeros(o.state_size).tobytes()) for i, o in enumerate(spec.oracles)],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.collections[collection_id] = collection
        self.statistics[collection_id] = CollectionStatistics(spec)
        return collection

    def _load_statistics(self, collection: Collection) -> CollectionStatistics:
        stats = CollectionStatistics(collection.spec)
        for row in self.db.query("SELECT input, n, support FROM statistics WHERE collection_id = ?", [collection.id]):
            stats.states[row["input"]] = OracleState(row["n"], np.frombuffer(row["support"], dtype=np.float64).copy())
        return stats

    def recompute_statistics(self, collection_id: str) -> CollectionStatistics:
        """The statistics recomputed from the stored reports alone (for audits and tests)."""
        collection = self.collections[collection_id]
        spec = collection.spec
        stats = CollectionStatistics(spec)
        for i, oracle in enumerate(spec.oracles):
            values = [
                row[0]
                for row in self.db.execute(
                    "SELECT value FROM reports WHERE collection = ? AND input = ? ORDER BY received_at, report_id",
                    [collection.key, i],
                )
            ]
            if values:
                stats.add(i, decode_values(oracle, values, i)[0])
        return stats

    def count_reports(self, collection_id: str) -> int:
        key = self.collections[collection_id].key
        return self.db.execute("SELECT count(*) FROM reports WHERE collection = ?", [key]).fetchone()[0]

    # reports

    def ingest(self, batches: list[IncomingBatch]) -> list[np.ndarray]:
        """Store every batch and update the statistics in one durable transaction.

        Returns, per batch, an int8 array of outcomes: :data:`NEW` where the report was new and is
        now counted, :data:`DUPLICATE` where its id was already stored for the collection (before,
        or earlier in this call), :data:`TOKEN_USED` where its enrollment token already carried
        another report. On any error the transaction rolls back and nothing is stored.
        """
        now = time.time()
        conn = self.db.conn
        updated: dict[str, CollectionStatistics] = {}
        # Concurrent requests' batches for the same (collection, input) are inserted and counted
        # together: one insert statement and one statistics update per group.
        groups: dict[tuple[str, int], list[int]] = {}
        for b, batch in enumerate(batches):
            groups.setdefault((batch.collection_id, batch.input), []).append(b)
        results: list[np.ndarray] = [np.zeros(0, dtype=np.int8)] * len(batches)
        conn.execute("BEGIN IMMEDIATE")
        try:
            for (cid, i), members in groups.items():
                parts = [batches[b] for b in members]
                merged = (
                    parts[0]
                    if len(parts) == 1
                    else IncomingBatch(
                        cid,
                        i,
                        [rid for p in parts for rid in p.report_ids],
                        [v for p in parts for v in p.values],
                        np.concatenate([p.rows for p in parts]),
                        [t for p in parts for t in p.tokens] if parts[0].tokens is not None else None,
                    )
                )
                outcomes = self._insert(conn, self.collections[cid].key, merged, now)
                bounds = np.cumsum([len(p) for p in parts])[:-1]
                for b, part in zip(members, np.split(outcomes, bounds)):
                    results[b] = part
                accepted = outcomes == NEW
                if not accepted.any():
                    continue
                if cid not in updated:
                    updated[cid] = self.statistics[cid].copy()
                stats = updated[cid]
                stats.add(i, merged.rows[accepted])
                state = stats.states[i]
                conn.execute(
                    "UPDATE statistics SET n = ?, support = ? WHERE collection_id = ? AND input = ?",
                    (state.n, state.support.tobytes(), cid, i),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # Readers see a collection's statistics change only as a whole, and only once committed.
        self.statistics.update(updated)
        return results

    @staticmethod
    def _insert(conn: sqlite3.Connection, key: int, batch: IncomingBatch, now: float) -> np.ndarray:
        """Insert the batch's new reports; returns each report's outcome. Fast path: one
        executemany, right when every id is new and no token is involved; otherwise row by row."""
        rows = [(key, rid, batch.input, v, now) for rid, v in zip(batch.report_ids, batch.values)]
        sql = "INSERT OR IGNORE INTO reports (collection, report_id, input, value, received_at) VALUES (?, ?, ?, ?, ?)"
        conn.execute("SAVEPOINT batch")
        if batch.tokens is None:
            before = conn.total_changes
            conn.executemany(sql, rows)
            if conn.total_changes - before == len(rows):
                conn.execute("RELEASE batch")
                return np.full(len(rows), NEW, dtype=np.int8)
            conn.execute("ROLLBACK TO batch")
        outcomes = np.full(len(rows), DUPLICATE, dtype=np.int8)
        cursor = conn.cursor()
        for j, row in enumerate(rows):
            if batch.tokens is not None:
                nonce = batch.tokens[j]
                used = cursor.execute(
                    "SELECT report_id FROM token_uses WHERE collection = ? AND nonce = ?", (key, nonce)
                ).fetchone()
                if used is not None and used[0] != row[1]:
                    outcomes[j] = TOKEN_USED
                    continue
            cursor.execute(sql, row)
            if cursor.rowcount == 1:
                outcomes[j] = NEW
                if batch.tokens is not None:
                    cursor.execute("INSERT INTO token_uses VALUES (?, ?, ?)", (key, batch.tokens[j], row[1]))
        conn.execute("RELEASE batch")
        return outcomes
