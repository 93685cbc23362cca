"""The store interface: collections, reports, settings and running statistics in one database.

The database is the single source of truth, so any number of service instances (processes, and
with PostgreSQL machines) can share one. Why the numbers they serve are never stale or lost:

- **Reports.** The primary key (collection, report id) decides which copy of a report is counted:
  an insert that conflicts is a duplicate, whichever instance got there first. An enrollment
  token's single use is decided the same way, by the key (collection, nonce).
- **Statistics.** Each instance owns *partial* sums that only it writes: per (collection, input,
  instance) the number of reports counted, and per cell of that input's support the sum so far
  (rows of their own, so that a report writes the cells it adds to and nothing else: a DE report
  one cell, whatever the collection's size; an OUE or SHE report over a domain of d its d at
  most). It writes them in the transaction that inserts the reports they count, as absolute
  values from an in-memory copy that is exact because nobody else writes those rows. A reader
  sums every instance's rows in one snapshot, so a read sees exactly the reports of the
  transactions committed before it: never a half-applied batch, never another instance's writes
  overwritten (the lost update of one shared row per input, read-modify-written by several
  processes, is what this replaces). Sums are exact for the integer counts of the frequency
  oracles and for the grid-valued mean reports (multiples of 2^-10, far below 2^53). An instance
  takes a fresh id at every start, so a restarted or killed instance's rows stay valid and keep
  being summed; rows grow with collections × cells × lanes × starts. (Dense rows of whole
  supports, as stores before schema 3 wrote them and as a copy from SQLite writes them, are
  summed alike.)
- **A write whose outcome is unknown** (the connection broke, the database restarted or a reply
  was lost, possibly after the commit) leaves the in-memory copy of this instance's partials
  unsure: the transaction may have committed its reports *and* the partials counting them, or
  neither. So after any failed write the instance takes a fresh id and starts new partials from
  zero (:meth:`Store._forget_partials`), and never writes its earlier rows again. Whatever those
  rows hold now, with or without the uncertain transaction, is consistent with the reports table
  (both change in one transaction), and it stays so: even a commit that lands later changes them
  together. A report of an uncertain write that is re-sent is a duplicate (its id is stored) or
  new (it is not), so it is counted exactly once either way. One write runs at a time per
  instance id (the writer's queue; a process with several write lanes gives each its own id,
  :meth:`Store.lanes`), so no other transaction of the old id can be in flight.
- **Shuffled batches.** A shuffler's batch is stored in one transaction: its reports, the partials
  counting them (the people's cells), the batch's row (its size, dummies and junk: the status's
  batches, the fewest people in one) and, when that row is new, its dummies added to the dummies'
  figure (:data:`DUMMIES`), written by the same transaction's last statements before its commit
  (:meth:`Store.ingest`, a :class:`ShuffledBatch` carried by the batch's reports): a batch's
  dummies count once per batch id, whichever of its reports were new. The service submits a batch's reports as
  one request, never in parts, and the writer never splits a request, so a crash at any moment
  leaves either nothing of the batch or the whole of it with its dummies and its row: never its
  dummies counted as people, never a row without its reports or reports without their row. The
  writer may group several batches (and other requests) into one transaction; each batch's row is
  then in the transaction that holds its reports, and if that transaction fails for one request,
  each request is stored alone, its row with it. The row's key (collection, batch id) makes a
  re-sent batch's row a no-op, and its reports are duplicates by their ids, so a batch whose
  answer was lost is counted once when the shuffler sends it again; a batch none of whose reports
  could be stored (all junk) counts nothing, and its row is written alone
  (:meth:`Store.record_batch`).
- **Collections** are immutable once created, so each instance caches them and looks the
  database up on a miss: one created on another instance is found there. A duplicate id is
  refused by the primary key (409), never by a race between instances.
- **Settings** (the admin token's hash, the enrollment HMAC key) are read from the database when
  used, so a rotation on one instance holds on all.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import os
import re
import secrets
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import numpy as np

from participant.spec import CollectionSpec
from participant.wire import decode_values
from protocols import OracleState

from ..estimation.choice import half_of
from ..estimation.statistics import CollectionStatistics

NEW, DUPLICATE, TOKEN_USED, CONFLICT = 1, 0, -1, -2
# The partial "input" holding, in its cell 0, how many of the reports counted are a shuffler's dummy
# reports: each batch's dummies, added once with its row (Store._dummies_updates), in the
# transaction that counts its reports.
DUMMIES = -1
# When the request being served must have its answer (the event loop's clock), so that its reads
# together take at most one timeout, not one each; set by the service for every request.
REQUEST_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("request_deadline", default=None)


# Test only: LDPNB_FAILPOINT=after-batch-reports makes the process stop (it sleeps, saying so on
# stderr, for a test to SIGKILL it) once a transaction has written a shuffled batch's reports and
# partials and not yet its row; where the two are one statement (PostgreSQL's all-new path), right
# after that statement. Unset, as it always is outside the tests, :func:`failpoint` does nothing.
FAILPOINT = os.environ.get("LDPNB_FAILPOINT", "")
AFTER_BATCH_REPORTS = "after-batch-reports"


def failpoint(name: str) -> None:
    """Stop here for good if ``$LDPNB_FAILPOINT`` names ``name`` (tests only; see :data:`FAILPOINT`)."""
    if FAILPOINT and FAILPOINT == name:
        sys.stderr.write(f"ldpnb failpoint {name} reached\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)


def read_deadline(timeout: float) -> float:
    """When a read starting now must end: ``timeout`` from now, or the request's deadline if sooner."""
    now = asyncio.get_running_loop().time() + timeout
    deadline = REQUEST_DEADLINE.get()
    return now if deadline is None else min(now, deadline)
SCHEMA_VERSION = 3
# A collection id: matched whole (fullmatch), so no trailing newline slips through as with "$".
COLLECTION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class CollectionExists(Exception):
    """A collection with that id already exists (specs are immutable)."""


class StoreUnavailable(Exception):
    """The database cannot serve the request now (deleted, replaced, full, starting, unreachable,
    out of connections or too slow).

    The message is what a client may be told: it never names the database's address, path or
    user (``detail`` holds that, for the operator's log, with passwords redacted).
    ``maybe_stored`` is true when a write's outcome is unknown: the connection failed after its
    statements were sent, so its transaction may have committed."""

    def __init__(self, message: str, detail: str = "", maybe_stored: bool = False):
        super().__init__(message)
        self.detail = detail or message
        self.maybe_stored = maybe_stored


@dataclass(frozen=True)
class Collection:
    """A created collection: its immutable spec and release threshold."""

    id: str
    spec: CollectionSpec
    min_reports: int
    created_at: float
    key: int = 0  # the collections table's integer key: reports are keyed by it
    enrollment: bool = False  # reports must carry a single-use enrollment token
    uid: str = ""  # globally unique (random 128 bits): what a device's ledger is keyed by

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "uid": self.uid,
            "fingerprint": self.spec.fingerprint,
            "spec": self.spec.to_dict(),
            "min_reports": self.min_reports,
            "created_at": self.created_at,
            "enrollment": self.enrollment,
        }


@dataclass(frozen=True)
class PartialUpdate:
    """What one transaction writes to this instance's partial statistics of one input of a
    collection: the reports counted after it (``n``) and the new sums of the ``cells`` it changes
    (``values``, float64); every other cell keeps its committed sum."""

    key: int
    input: int
    n: int
    cells: np.ndarray
    values: np.ndarray


@dataclass(eq=False)
class ShuffledBatch:
    """A shuffler's batch whose row is written in the transaction storing its reports: its
    shuffler's id for it, its ``size`` in reports, how many were ``dummies``, and how many were
    ``junk`` before the store (did not open, or were refused by the checks; the store adds those
    it refuses, conflicts). Every :class:`IncomingBatch` of the batch carries the same one.
    ``noted`` is set once the transaction committed: whether it wrote the row (False for a
    re-sent batch, whose row was there)."""

    collection_id: str
    batch: str
    size: int
    dummies: int
    junk: int
    noted: bool = False


@dataclass(frozen=True)
class IncomingBatch:
    """Validated reports of one collection, all carrying the same input, waiting to be stored:
    their ids, their wire values (stored as received) and their decoded rows (for the statistics),
    or ``None`` for rows the store is to decode with the rest of their group, from values that
    passed :func:`participant.wire.check_payload` (a single report's, whose row alone cost more
    to build than its share of one vectorised decoding per input and commit)."""

    collection_id: str
    input: int
    report_ids: list[bytes]
    values: list
    rows: np.ndarray | None
    tokens: list[bytes] | None = None  # enrollment token nonces, one per report
    # The shuffler's batch these reports belong to, whose row (and, with it, its dummies) goes in
    # their transaction.
    shuffled: ShuffledBatch | None = None

    def __len__(self) -> int:
        return len(self.report_ids)


def merge_group(parts: list[IncomingBatch]) -> IncomingBatch:
    """One batch holding ``parts`` (same collection and input) in order; its rows are ``None``
    when any part's are (the store decodes them all)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    return IncomingBatch(
        first.collection_id,
        first.input,
        [rid for p in parts for rid in p.report_ids],
        [v for p in parts for v in p.values],
        None if any(p.rows is None for p in parts) else np.concatenate([p.rows for p in parts]),
        [t for p in parts for t in p.tokens] if first.tokens is not None else None,
    )


class Store(ABC):
    """One database shared by every instance. Subclasses implement the ``_``-prefixed queries;
    this class holds what every backend shares: the collection cache, this instance's partial
    statistics, and grouping of batches into one transaction."""

    #: what the database is, for messages (a path or a URL without its password)
    location: str
    #: transactions of reports one service process keeps in flight at once (see :meth:`lanes`)
    write_lanes = 1

    def __init__(self):
        self.instance = secrets.token_hex(8)
        self._collections: dict[str, Collection] = {}
        # This instance's partial statistics, per collection key: only this instance writes them.
        self._own: dict[int, CollectionStatistics] = {}

    def lanes(self) -> list[Store]:
        """``write_lanes`` stores to ingest through at once, one transaction in flight on each:
        this one, then views of it sharing its database and collection cache (PostgreSQL gives
        each a connection of its own), each with an instance id and partial statistics of its own.
        To the database each lane is one more instance, so the argument of the module's note holds
        lane by lane: while one lane's transaction waits for its commit, the next can be sent."""
        views = []
        for _ in range(self.write_lanes - 1):
            view = copy.copy(self)
            view.instance, view._own = secrets.token_hex(8), {}
            views.append(view)
        return [self, *views]

    # lifecycle and settings

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def get_setting(self, key: str) -> str | None: ...

    @abstractmethod
    async def set_setting(self, key: str, value: str, replace: bool = True) -> str:
        """Store ``value`` under ``key`` (keeping an existing value unless ``replace``); returns
        the value now stored, so instances starting together agree on one."""

    async def health(self) -> str | None:
        """None when the database takes reads and writes, else why not."""
        return None

    def held_elsewhere(self) -> str | None:
        """Why writes wait now, when another process holds the database (what a client is told), else None."""
        return None

    # collections

    @abstractmethod
    async def _insert_collection(
        self, collection_id: str, uid: str, spec_json: str, min_reports: int, created_at: float, enrollment: bool
    ) -> int | None:
        """Insert a collection row; returns its integer key, or None if the id exists."""

    @abstractmethod
    async def _collection_row(self, collection_id: str) -> dict | None:
        """The collection's row (``key, id, uid, spec, min_reports, created_at, enrollment``), or None."""

    @abstractmethod
    async def _collection_ids(self, after: str = "", limit: int = 0) -> list[str]:
        """Up to ``limit`` (0: all) collection ids after ``after``, in id order (no specs read)."""

    async def create_collection(
        self, collection_id: str, spec: CollectionSpec, min_reports: int, enrollment: bool = False
    ) -> Collection:
        """Store a new collection; raises :class:`CollectionExists`."""
        created_at = time.time()
        uid = secrets.token_hex(16)
        key = await self._insert_collection(
            collection_id, uid, spec.to_json(), int(min_reports), created_at, enrollment
        )
        if key is None:
            raise CollectionExists(collection_id)
        collection = Collection(collection_id, spec, int(min_reports), created_at, key, bool(enrollment), uid)
        self._collections[collection_id] = collection
        return collection

    async def collection(self, collection_id: str) -> Collection | None:
        """The collection, from the cache or (created by another instance) the database."""
        cached = self._collections.get(collection_id)
        if cached is not None:
            return cached
        row = await self._collection_row(collection_id)
        if row is None:
            return None
        collection = self._collection_from_row(row)
        self._collections[collection_id] = collection
        return collection

    async def list_collections(self, after: str = "", limit: int = 0) -> list[Collection]:
        """Collections in id order, those with ids after ``after``, at most ``limit`` (0: all)."""
        # Ids first: a spec is megabytes of JSON for the largest collections, read and parsed only
        # for a collection this instance has not seen (/metrics lists every collection each scrape).
        collections = []
        for collection_id in await self._collection_ids(after, limit):
            collection = await self.collection(collection_id)
            if collection is not None:  # not deleted since listed
                collections.append(collection)
        return collections

    @staticmethod
    def _collection_from_row(row) -> Collection:
        if not COLLECTION_ID.fullmatch(row["id"]):
            raise ValueError(
                f"the database holds a collection with the invalid id {row['id']!r} (ids are 1-64 letters, digits, "
                "'-' or '_'); rename or remove it before starting the service"
            )
        return Collection(
            row["id"],
            CollectionSpec.from_json(row["spec"]),
            int(row["min_reports"]),
            float(row["created_at"]),
            int(row["key"]),
            bool(row["enrollment"]),
            row["uid"],
        )

    # statistics

    @abstractmethod
    async def _partial_rows(
        self, key: int
    ) -> tuple[list[tuple[int, int]], list[tuple[int, np.ndarray, np.ndarray]], list[tuple[int, int, bytes]]]:
        """Every instance's partial statistics of a collection, summed over the instances in one
        snapshot: ``(input, n)`` of the counts; ``(input, cells, sums)`` of the cells, per input
        (each cell once, int64, and its float64 sum), as arrays so that a collection of a million
        cells costs no Python object per cell; and the dense rows ``(input, n, support bytes)``
        (earlier stores' and copies')."""

    async def statistics(self, collection: Collection) -> CollectionStatistics:
        """The collection's statistics: the sum of every instance's committed partials, summed on a
        worker thread (a collection of 55,001 inputs is as many arrays to add to)."""
        counts, cells, dense = await self._partial_rows(collection.key)
        return await asyncio.to_thread(self._summed, collection, counts, cells, dense)

    @staticmethod
    def _summed(collection: Collection, counts, cells, dense) -> CollectionStatistics:
        stats = CollectionStatistics(collection.spec)
        for i, n in counts:
            if i >= 0:
                stats.states[i].n += int(n)
        for i, index, value in cells:
            if i == DUMMIES:
                stats.dummies += float(np.sum(value))
            else:
                stats.states[i].support[index] += value  # each cell once per input: no repeated index
        for i, n, support in dense:
            stats.states[i] += OracleState(n, np.frombuffer(support, dtype=np.float64))
        return stats

    @abstractmethod
    async def counted(self, collection: Collection) -> int:
        """Reports counted in the collection's statistics (every instance's partials), without
        reading the statistics themselves."""

    @abstractmethod
    async def report_counts(self) -> dict[str, int]:
        """Reports counted per collection id (every instance's partials)."""

    @abstractmethod
    async def dummy_counts(self) -> dict[str, float]:
        """Per collection id with any, how many of its counted reports are its shufflers' dummies
        (every instance's partials: each batch's, written with its row in the transaction that
        counts its reports, so a crash never leaves dummies counted as people)."""

    @abstractmethod
    async def record_batch(self, collection: Collection, batch: str, size: int, dummies: int, junk: int) -> bool:
        """Note a shuffled batch none of whose reports is to be stored (all ``junk``: did not open
        or were refused; its shuffler's id for it, its ``size`` in reports, how many were
        ``dummies``), once per id; whether it was new. A batch with reports to store is noted in
        their transaction instead (:class:`ShuffledBatch`)."""

    @abstractmethod
    async def batch_totals(self, collection: Collection) -> dict[str, int]:
        """The collection's shuffled batches noted so far: how many ``batches``, their ``reports``,
        ``dummies`` and ``junk``, and the ``smallest`` number of other reports than dummies in one."""

    @abstractmethod
    async def _stored_values(self, key: int, input_index: int | None = None) -> list[tuple[int, object]]:
        """``(input, wire value)`` of the collection's stored reports (of one input if given)."""

    @abstractmethod
    async def _stored_reports(self, key: int, input_index: int) -> list[tuple[bytes, object]]:
        """``(report id, wire value)`` of the collection's stored reports of one input."""

    async def statistics_halves(self, collection: Collection, dummies: float = 0.0) -> tuple[CollectionStatistics, CollectionStatistics]:
        """The statistics of the stored reports in each of the two halves their ids put them in
        (:func:`~aggregator.estimation.choice.half_of`: the same report always in the same half),
        each counting the share of ``dummies`` (the collection's, in expectation) its reports are
        of all: dummies fall in either half as their random ids do. What the ``auto`` estimator
        chooses from; one read of every stored report."""
        halves = (CollectionStatistics(collection.spec), CollectionStatistics(collection.spec))
        for i, oracle in enumerate(collection.spec.oracles):
            stored = await self._stored_reports(collection.key, i)
            if not stored:
                continue
            # Decoded in a worker thread: a large collection's reports take seconds, and the
            # service's event loop must go on answering meanwhile.
            side, rows = await asyncio.to_thread(_halves_of, oracle, stored, i)
            for h, half in enumerate(halves):
                if (side == h).any():
                    half.add(i, rows[side == h])
        total = sum(h.n_reports for h in halves)
        for half in halves:
            half.dummies = dummies * half.n_reports / total if total else 0.0
        return halves

    async def recompute_statistics(self, collection: Collection) -> CollectionStatistics:
        """The statistics recomputed from the stored reports alone (for audits and tests)."""
        stats = CollectionStatistics(collection.spec)
        for i, oracle in enumerate(collection.spec.oracles):
            values = [v for _, v in await self._stored_values(collection.key, i)]
            if values:
                stats.add(i, decode_values(oracle, values, i)[0])
        return stats

    @abstractmethod
    async def count_reports(self, collection: Collection) -> int:
        """Reports stored for the collection (a count in the database, not a fetch)."""

    # reports

    def _own_statistics(self, collection: Collection) -> CollectionStatistics:
        own = self._own.get(collection.key)
        if own is None:
            own = self._own[collection.key] = CollectionStatistics(collection.spec)
        return own

    def _groups(self, batches: list[IncomingBatch]) -> dict[tuple[str, int], list[int]]:
        """Batch positions per (collection, input): concurrent requests' reports for one input
        are inserted and counted together, one statement and one statistics row each."""
        groups: dict[tuple[str, int], list[int]] = {}
        for b, batch in enumerate(batches):
            groups.setdefault((batch.collection_id, batch.input), []).append(b)
        return groups

    async def ingest(self, batches: list[IncomingBatch]) -> list[np.ndarray]:
        """Store every batch, update this instance's partial statistics and write the rows of the
        shuffled batches the reports belong to (:class:`ShuffledBatch`) in one durable transaction.

        Returns, per batch, an int8 array of outcomes: :data:`NEW` where the report was new and is
        now counted, :data:`DUPLICATE` where the same report (id, input and value) was already
        stored, :data:`CONFLICT` where its id was stored with another input or value (the first
        is kept), :data:`TOKEN_USED` where its enrollment token already carried another report.
        On any error the transaction rolls back and nothing is stored or counted. Raises
        :class:`StoreUnavailable` when the database cannot take writes.
        """
        groups = self._groups(batches)
        results: list[np.ndarray] = [np.zeros(0, dtype=np.int8)] * len(batches)
        merged = {
            group: self._decoded(merge_group([batches[b] for b in members])) for group, members in groups.items()
        }
        # Where each batch's reports sit in its group's outcomes: (group, start, end).
        spans: list[tuple[tuple[str, int], int, int]] = [(("", 0), 0, 0)] * len(batches)
        for group, members in groups.items():
            start = 0
            for b in members:
                spans[b] = (group, start, start + len(batches[b]))
                start += len(batches[b])
        notes: dict[int, tuple[ShuffledBatch, list]] = {}
        for b, batch in enumerate(batches):
            if batch.shuffled is not None:
                notes.setdefault(id(batch.shuffled), (batch.shuffled, []))[1].append(spans[b])
        try:
            outcomes, updates, noted = await self._transaction(merged, list(notes.values()))
        except BaseException:
            self._forget_partials()
            raise
        for b, (group, start, end) in enumerate(spans):
            # Plain slices: np.split's per-piece axis juggling cost a µs per single-report request.
            if group in outcomes:
                results[b] = outcomes[group][start:end]
        # This instance's partials change only once committed.
        self._apply(updates)
        for note in noted:
            note.noted = True
        return results

    def _batch_rows(self, notes: list[tuple[ShuffledBatch, list]], outcomes) -> list[tuple[ShuffledBatch, tuple]]:
        """The shuffled batches' rows ``(collection key, batch, size, dummies, junk)`` the
        transaction writes once it has its reports' ``outcomes`` (those it refused, conflicts and
        used tokens, are junk too), each (collection, batch) once: a batch re-sent while its first
        copy is in the same transaction is a duplicate like its reports."""
        rows: dict[tuple[int, str], tuple[ShuffledBatch, tuple]] = {}
        for note, spans in notes:
            refused = sum(
                int(np.isin(outcomes[group][start:end], (CONFLICT, TOKEN_USED)).sum()) for group, start, end in spans
            )
            key = self._collections[note.collection_id].key
            row = (key, note.batch, note.size, note.dummies, note.junk + refused)
            rows.setdefault((key, note.batch), (note, row))
        return list(rows.values())

    def _decoded(self, batch: IncomingBatch) -> IncomingBatch:
        """``batch`` with its rows, decoded from its values in one vectorised call if it has none."""
        if batch.rows is not None:
            return batch
        oracle = self._collections[batch.collection_id].spec.oracles[batch.input]
        rows, bad, message = decode_values(oracle, batch.values, batch.input)
        if bad.any():  # check_payload refuses all that decode_values refuses: a bug, not a report
            raise ValueError(f"an unchecked value reached the store: {message}")
        return replace(batch, rows=rows)

    def _forget_partials(self) -> None:
        """Leave this instance's partial rows as the database holds them and continue under a fresh
        id from zero (see the module's note on writes whose outcome is unknown)."""
        self.instance = secrets.token_hex(8)
        self._own = {}

    def _updated_partials(
        self, merged: dict[tuple[str, int], IncomingBatch], outcomes: dict[tuple[str, int], np.ndarray]
    ) -> list[PartialUpdate]:
        """What the transaction writes to this instance's partials: per input that gained a
        report, its new count and the new sums of the cells its new reports add to. Reads the
        committed partials and changes nothing: they change once the transaction commits
        (:meth:`_apply`). Costs what the reports carry, not what the collection holds."""
        updates = []
        for (cid, i), batch in merged.items():
            found = outcomes[(cid, i)]
            accepted = found == NEW
            new = int(accepted.sum())
            if not new:
                continue
            collection = self._collections[cid]
            state = self._own_statistics(collection).states[i]
            rows = batch.rows if new == len(found) else batch.rows[accepted]
            cells, added = collection.spec.oracles[i].sparse_support(rows)
            updates.append(PartialUpdate(collection.key, i, state.n + new, cells, state.support[cells] + added))
        return updates

    def _dummies_updates(self, noted: list[ShuffledBatch]) -> list[PartialUpdate]:
        """What the transaction writes to this instance's dummies' partial (:data:`DUMMIES`), per
        collection: its committed figure plus the dummies of every batch in ``noted``, those whose
        row the transaction wrote. A batch's dummies are counted once, with its row, whichever of
        its reports were new: a batch re-sent finds its row there and adds none, and one holding
        an earlier batch's report again (a duplicate, not counted) still adds all of its own."""
        added: dict[str, int] = {}
        for note in noted:
            added[note.collection_id] = added.get(note.collection_id, 0) + note.dummies
        updates = []
        for cid, dummies in added.items():
            if dummies:
                collection = self._collections[cid]
                total = self._own_statistics(collection).dummies + dummies
                updates.append(PartialUpdate(collection.key, DUMMIES, 0, np.zeros(1, dtype=np.int64), np.array([float(total)])))
        return updates

    def _apply(self, updates: list[PartialUpdate]) -> None:
        """Make the committed ``updates`` this instance's partials (whose statistics
        :meth:`_updated_partials` made sure of)."""
        for update in updates:
            if update.input == DUMMIES:
                self._own[update.key].dummies = float(update.values[0])
                continue
            state = self._own[update.key].states[update.input]
            state.n = update.n
            state.support[update.cells] = update.values

    @staticmethod
    def _cell_rows(instance: str, updates: list[PartialUpdate]) -> tuple[list[tuple], list[tuple]]:
        """The rows ``updates`` write: ``(key, input, instance, n)`` and ``(key, input, instance,
        cell, sum)``."""
        counts = [(u.key, u.input, instance, u.n) for u in updates if u.input != DUMMIES]
        cells = [
            (u.key, u.input, instance, cell, value)
            for u in updates
            for cell, value in zip(u.cells.tolist(), u.values.tolist())
        ]
        return counts, cells

    @abstractmethod
    async def _transaction(
        self, merged: dict[tuple[str, int], IncomingBatch], notes: list[tuple[ShuffledBatch, list]]
    ) -> tuple[dict[tuple[str, int], np.ndarray], list[PartialUpdate], list[ShuffledBatch]]:
        """Insert every group's reports, write the changed partials and the shuffled batches' rows
        (``notes``: each batch and where its reports sit in the groups, :meth:`_batch_rows`) in one
        transaction; returns the outcomes per group, the partials' updates
        (:meth:`_updated_partials`) and the batches whose rows it wrote (not there before)."""


def classify(report_ids: list[bytes], inserted: set[bytes], stored: dict[bytes, tuple[int, object]], batch_input: int, values: list) -> np.ndarray:
    """Outcomes of a batch whose new ids are ``inserted`` and whose other ids were found stored as
    ``stored[id] = (input, value)``: the first occurrence of an inserted id is NEW, any later one
    is compared with what is stored like an id stored before."""
    outcomes = np.full(len(report_ids), DUPLICATE, dtype=np.int8)
    seen: set[bytes] = set()
    first_values: dict[bytes, object] = {}
    for j, rid in enumerate(report_ids):
        if rid in inserted and rid not in seen:
            outcomes[j] = NEW
            seen.add(rid)
            first_values[rid] = values[j]
            continue
        kept_input, kept_value = stored.get(rid, (batch_input, first_values.get(rid)))
        if kept_input != batch_input or kept_value != values[j]:
            outcomes[j] = CONFLICT
    return outcomes


def _halves_of(oracle, stored: list[tuple[bytes, object]], input_index: int) -> tuple[np.ndarray, np.ndarray]:
    """The half (0 or 1) of each of ``stored``'s ``(report id, wire value)`` and their decoded rows."""
    ids = np.frombuffer(b"".join(rid for rid, _ in stored), dtype=np.uint8).reshape(len(stored), -1)
    return half_of(ids), decode_values(oracle, [v for _, v in stored], input_index)[0]
