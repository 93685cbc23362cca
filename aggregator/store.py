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
from participant.wire import decode_payload, encode_payload
from protocols import OracleState

from .statistics import CollectionStatistics


class CollectionExists(Exception):
    """A collection with that id already exists (specs are immutable)."""


@dataclass(frozen=True)
class Collection:
    """A created collection: its immutable spec and release threshold."""

    id: str
    spec: CollectionSpec
    min_reports: int
    created_at: float

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "spec": self.spec.to_dict(),
            "min_reports": self.min_reports,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class IncomingReport:
    """A validated report waiting to be stored: ``row`` is its decoded protocol report."""

    collection_id: str
    report_id: bytes
    input: int
    row: np.ndarray | int


class Store:
    def __init__(self, path: str | Path):
        self.path = str(path)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db = Database(conn)
        self.db.enable_wal()
        conn.execute("PRAGMA synchronous=FULL")
        self._create_schema()
        self.collections: dict[str, Collection] = {}
        self.statistics: dict[str, CollectionStatistics] = {}
        for row in self.db.query("SELECT * FROM collections"):
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
                {"id": str, "spec": str, "min_reports": int, "created_at": float}, pk="id", not_null={"spec"}
            )
        if "reports" not in db.table_names():
            db.execute(
                "CREATE TABLE reports (collection_id TEXT NOT NULL REFERENCES collections(id), "
                "report_id BLOB NOT NULL, input INTEGER NOT NULL, value NOT NULL, received_at REAL NOT NULL, "
                "PRIMARY KEY (collection_id, report_id)) WITHOUT ROWID"
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
        return Collection(row["id"], CollectionSpec.from_json(row["spec"]), row["min_reports"], row["created_at"])

    def create_collection(self, collection_id: str, spec: CollectionSpec, min_reports: int) -> Collection:
        """Store a new collection with empty statistics; raises :class:`CollectionExists`."""
        if collection_id in self.collections:
            raise CollectionExists(collection_id)
        collection = Collection(collection_id, spec, int(min_reports), time.time())
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO collections (id, spec, min_reports, created_at) VALUES (?, ?, ?, ?)",
                (collection_id, json.dumps(spec.to_dict()), collection.min_reports, collection.created_at),
            )
            conn.executemany(
                "INSERT INTO statistics (collection_id, input, n, support) VALUES (?, ?, 0, ?)",
                [(collection_id, i, np.zeros(d).tobytes()) for i, d in enumerate(spec.domain_sizes)],
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
                row["value"]
                for row in self.db.query(
                    "SELECT value FROM reports WHERE collection_id = ? AND input = ?", [collection_id, i]
                )
            ]
            if values:
                stats.add(i, np.array([decode_payload(oracle, v, i) for v in values]))
        return stats

    def count_reports(self, collection_id: str) -> int:
        return self.db.execute("SELECT count(*) FROM reports WHERE collection_id = ?", [collection_id]).fetchone()[0]

    # reports

    def ingest(self, reports: list[IncomingReport]) -> list[bool]:
        """Store ``reports`` and update their collections' statistics in one durable transaction.

        Returns, per report, True if it was new and is now counted, False if its id was already
        stored for its collection (earlier or earlier in this list). On any error nothing is stored.
        """
        now = time.time()
        conn = self.db.conn
        accepted: list[bool] = []
        # (collection, input) -> rows newly accepted
        fresh: dict[tuple[str, int], list] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.cursor()
            for r in reports:
                spec = self.collections[r.collection_id].spec
                value = encode_payload(spec.oracles[r.input], r.row)
                cursor.execute(
                    "INSERT OR IGNORE INTO reports (collection_id, report_id, input, value, received_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (r.collection_id, r.report_id, r.input, value, now),
                )
                is_new = cursor.rowcount == 1
                accepted.append(is_new)
                if is_new:
                    fresh.setdefault((r.collection_id, r.input), []).append(r.row)
            updated: dict[str, CollectionStatistics] = {}
            for (cid, i), rows in fresh.items():
                if cid not in updated:
                    updated[cid] = self.statistics[cid].copy()
                stats = updated[cid]
                stats.add(i, np.array(rows))
                state = stats.states[i]
                cursor.execute(
                    "UPDATE statistics SET n = ?, support = ? WHERE collection_id = ? AND input = ?",
                    (state.n, state.support.tobytes(), cid, i),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # Readers see a collection's statistics change only as a whole, and only once committed.
        self.statistics.update(updated)
        return accepted
