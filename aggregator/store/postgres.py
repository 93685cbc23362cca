"""The shared store: PostgreSQL through asyncpg, for any number of service instances.

Every instance talks to the same database; the argument for why no count is lost or doubled is in
:mod:`aggregator.store.base`. Here, PostgreSQL's unique indexes decide races between instances:
an insert on (collection, report id) waits for a concurrent insert of the same key to commit or
roll back, then skips it (``ON CONFLICT DO NOTHING``), fails (the all-new statement, which then
leaves nothing behind) or inserts, so exactly one copy is counted.
Commits are durable (``synchronous_commit`` as the server sets it, on by default). Report values
are stored msgpack-packed (an integer index or the payload bytes, as received).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import msgpack
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
    read_deadline,
)
from .defaults import DEFAULT_POOL, DEFAULT_TIMEOUT, POSTGRES_WRITE_LANES

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS collections (
    key integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text UNIQUE NOT NULL, uid text UNIQUE NOT NULL, spec text NOT NULL, min_reports bigint NOT NULL,
    created_at double precision NOT NULL, enrollment boolean NOT NULL);
CREATE TABLE IF NOT EXISTS reports (
    collection integer NOT NULL, report_id bytea NOT NULL, input integer NOT NULL,
    value bytea NOT NULL, received_at double precision NOT NULL,
    PRIMARY KEY (collection, report_id));
CREATE TABLE IF NOT EXISTS token_uses (
    collection integer NOT NULL, nonce bytea NOT NULL, report_id bytea NOT NULL,
    PRIMARY KEY (collection, nonce));
CREATE TABLE IF NOT EXISTS partials (
    collection integer NOT NULL, input integer NOT NULL, instance text NOT NULL,
    n bigint NOT NULL, support bytea NOT NULL,
    PRIMARY KEY (collection, input, instance));
CREATE TABLE IF NOT EXISTS partial_counts (
    collection integer NOT NULL, input integer NOT NULL, instance text NOT NULL, n bigint NOT NULL,
    PRIMARY KEY (collection, input, instance));
CREATE TABLE IF NOT EXISTS partial_cells (
    collection integer NOT NULL, input integer NOT NULL, instance text NOT NULL, cell integer NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (collection, input, instance, cell));
CREATE TABLE IF NOT EXISTS shuffled_batches (
    collection integer NOT NULL, batch text NOT NULL, size integer NOT NULL, dummies integer NOT NULL,
    junk integer NOT NULL, PRIMARY KEY (collection, batch));
"""
MIGRATION_LOCK = 0x6C64706E62  # "ldpnb": instances starting together migrate one at a time

INSERT_MANY = (
    "INSERT INTO reports (collection, report_id, input, value, received_at) "
    "SELECT $1, r, $2, v, $3 FROM unnest($4::bytea[], $5::bytea[]) AS t(r, v) "
    "ON CONFLICT DO NOTHING RETURNING report_id"
)
# The common case in one statement (one round trip, its own transaction): insert every report and
# write the partials that assume all of them new. A plain insert, without ON CONFLICT: a report
# whose id is stored already (or comes twice) fails the statement with a unique violation, which
# rolls the whole of it back, and the group goes the slower way. Skipping the speculative
# insertion ON CONFLICT needs took PostgreSQL 15 % less time on a group of 64 (documentation, *Several
# instances*). Like ON CONFLICT, the insert waits for a concurrent transaction inserting the same
# id to end: it fails if that one commits, and goes ahead if it rolls back. The shuffled batches'
# rows are in it too (none, but for a shuffler's batch), so that a batch's reports and its row are
# one statement: what it returns is the batches whose rows it wrote. Each collection's dummies'
# partial becomes its committed figure ($19, $20: keys and figures) plus the dummies of the
# batches whose rows it wrote (Store._dummies_updates): a batch whose row was there adds none.
ALL_NEW = f"""
WITH ins AS (
    INSERT INTO reports (collection, report_id, input, value, received_at)
    SELECT c, r, i, v, $5 FROM unnest($1::int[], $2::bytea[], $3::int[], $4::bytea[]) AS t(c, r, i, v)
), counted AS (
    INSERT INTO partial_counts (collection, input, instance, n)
    SELECT c, i, $6, n FROM unnest($7::int[], $8::int[], $9::bigint[]) AS t(c, i, n)
    ON CONFLICT (collection, input, instance) DO UPDATE SET n = excluded.n
), summed AS (
    INSERT INTO partial_cells (collection, input, instance, cell, value)
    SELECT c, i, $6, x, v FROM unnest($10::int[], $11::int[], $12::int[], $13::float8[]) AS t(c, i, x, v)
    ON CONFLICT (collection, input, instance, cell) DO UPDATE SET value = excluded.value
), noted AS (
    INSERT INTO shuffled_batches (collection, batch, size, dummies, junk)
    SELECT * FROM unnest($14::int[], $15::text[], $16::int[], $17::int[], $18::int[])
    ON CONFLICT DO NOTHING RETURNING collection, batch, dummies
), dummied AS (
    INSERT INTO partial_cells (collection, input, instance, cell, value)
    SELECT n.collection, {DUMMIES}, $6, 0, b.figure + n.added
    FROM (SELECT collection, sum(dummies) AS added FROM noted GROUP BY collection) AS n
    JOIN unnest($19::int[], $20::float8[]) AS b(c, figure) ON b.c = n.collection
    WHERE n.added > 0
    ON CONFLICT (collection, input, instance, cell) DO UPDATE SET value = excluded.value
)
SELECT collection, batch FROM noted
"""
NOTE_BATCHES = (
    "INSERT INTO shuffled_batches (collection, batch, size, dummies, junk) "
    "SELECT * FROM unnest($1::int[], $2::text[], $3::int[], $4::int[], $5::int[]) "
    "ON CONFLICT DO NOTHING RETURNING collection, batch"
)
UPSERT_COUNTS = (
    "INSERT INTO partial_counts SELECT c, i, $3, n FROM unnest($1::int[], $2::int[], $4::bigint[]) AS t(c, i, n) "
    "ON CONFLICT (collection, input, instance) DO UPDATE SET n = excluded.n"
)
UPSERT_CELLS = (
    "INSERT INTO partial_cells SELECT c, i, $3, x, v FROM unnest($1::int[], $2::int[], $4::int[], $5::float8[]) "
    "AS t(c, i, x, v) ON CONFLICT (collection, input, instance, cell) DO UPDATE SET value = excluded.value"
)
STORED = "SELECT report_id, input, value FROM reports WHERE collection = $1 AND report_id = ANY($2::bytea[])"


def is_postgres_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


log = logging.getLogger("ldpnb.aggregator")


class _OneLineEvery(logging.Filter):
    """Lets one record through every ``seconds``, in one line: asyncpg's pool logs a traceback for
    every failed attempt to reconnect while a database restarts (six to eight per restart)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.last = seconds, -float("inf")

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last < self.seconds:
            return False
        self.last = now
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


logging.getLogger("asyncpg.pool").addFilter(_OneLineEvery(5.0))
# What says the database is away, restarting, out of connections or too slow (not what a query
# did wrong): connection and interface errors, and the classes 08 (connection), 53 (resources)
# and 57 (operator intervention: shutdown, restart, cancelled statement).
CONNECTION_ERRORS = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    # The driver's own view of a connection a cancelled query left mid-protocol ("cannot switch to state").
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.OperatorInterventionError,
)
SECRET_PARAMETERS = {"password", "sslpassword", "passfile", "sslkey"}
# What says the database refuses writes as it stands (read-only: a standby, or
# default_transaction_read_only), not that a query was wrong: 503 like an absent database.
REFUSED_WRITES = (asyncpg.ReadOnlySQLTransactionError,)
READ_ONLY = "the database refuses writes (it is read-only)"


def redacted(url: str) -> str:
    """``url`` without its password (in the user part or as a query parameter), for logs."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@")
    query = urlencode(
        [(k, "***" if k.lower() in SECRET_PARAMETERS else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
        safe="*",
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


# Times a transaction that PostgreSQL rolled back to break a deadlock is tried again. Lanes insert
# in one order (:func:`_in_lock_order`), so two lanes storing the same reports cannot deadlock on
# them; a deadlock needs another party (a foreign transaction, a report re-sent under another
# input, enrolled reports, which go in their batch's order). The pause before trying again, up to
# DEADLOCK_PAUSE seconds times the attempt, lets the transaction that survived finish first: tried
# again at once, the lane can take back the row it just lost before the survivor, woken, takes
# it, and the two deadlock anew.
DEADLOCK_ATTEMPTS = 3
DEADLOCK_PAUSE = 0.05


def _in_lock_order(merged) -> list:
    """``merged``'s ``(group, batch, order)`` triples, groups by (collection, input) and ``order``
    the batch's positions by report id: the one order every transaction inserts in, so that two of
    them storing the same reports wait for each other at most one way round. An enrolled batch's
    ``order`` is None: it goes in its own order (of two reports spending one token, the first
    takes it)."""
    groups = sorted(merged.items(), key=lambda item: item[0])
    return [
        (group, batch, None if batch.tokens is not None else sorted(range(len(batch)), key=batch.report_ids.__getitem__))
        for group, batch in groups
    ]


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection goes back to the pool with: nothing to undo. asyncpg's default reset
    (``RESET ALL``, ``UNLISTEN *``, ``CLOSE ALL``, releasing session locks) is one more round
    trip per transaction (50 µs of this process's CPU and 100 µs of wall time, measured on
    asyncio's loop), and this store sets no session state: no setting, listener, cursor or
    session lock (the migration's lock is the transaction's). asyncpg still rolls back a
    transaction left open before this."""


class PostgresStore(Store):
    # While one transaction waits for its commit, the next can be sent. At 64 single reports in
    # flight this raised the worker's share of a core from 0.89 to 0.93 when each transaction
    # took a pooled connection; with the lanes' connections held, one lane and two measure alike
    # (documentation, *Several instances*).
    write_lanes = POSTGRES_WRITE_LANES

    def __init__(self, url: str, pool: asyncpg.Pool, timeout: float = DEFAULT_TIMEOUT):
        super().__init__()
        self.url, self.location, self.pool, self.timeout = url, redacted(url), pool, timeout
        # The connection this lane writes through, taken from the pool at its first transaction
        # and kept until a write fails or the database closes it (:meth:`_hold`): taking and
        # giving back a pooled connection (asyncpg's release runs as a task of its own) cost 43 µs
        # of CPU per transaction (in process, a pooled SELECT 1 took 52 µs against 9 on a held
        # connection).
        self._conn: asyncpg.Connection | None = None
        self._writing: list[PostgresStore] = [self]  # every lane, shared, so that close() frees their connections

    def lanes(self) -> list[Store]:
        """:meth:`Store.lanes`, each writing through a connection of its own (held from the pool)."""
        lanes = super().lanes()
        for lane in lanes[1:]:
            lane._conn = None
            self._writing.append(lane)
        return lanes

    @classmethod
    async def open(cls, url: str, pool_size: int = DEFAULT_POOL, timeout: float = DEFAULT_TIMEOUT) -> PostgresStore:
        """Connect (``pool_size`` connections, opened now, so a database without room for them
        refuses the start, not the requests; :attr:`write_lanes` of them are held by the writer,
        so there must be at least one more), then create or migrate the schema (one instance at
        a time). ``timeout`` bounds every connect, wait for a pooled connection and query."""
        if pool_size <= cls.write_lanes:
            raise ValueError(
                f"a pool of {pool_size} connections leaves none for reads beside {cls.write_lanes} write lanes"
            )
        pool = await asyncpg.create_pool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            command_timeout=timeout,
            timeout=timeout,
            reset=_keep_session,
        )
        store = cls(url, pool, timeout)
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                await conn.execute(SCHEMA)
                version = await conn.fetchval("SELECT value FROM settings WHERE key = 'schema_version'")
                if version is not None and int(version) > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"{store.location} has schema version {version}; this ldpnb reads up to {SCHEMA_VERSION}"
                    )
                await conn.execute(
                    "INSERT INTO settings VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET value = $1",
                    str(SCHEMA_VERSION),
                )
        except BaseException:
            await pool.close()
            raise
        return store

    async def close(self) -> None:
        """Give the lanes' connections back and close the pool: gracefully within the timeout, else
        at once (the database may be away)."""
        try:
            async with asyncio.timeout(self.timeout):
                for lane in self._writing:
                    await lane._drop()
                await self.pool.close()
        except (*CONNECTION_ERRORS, asyncio.CancelledError):
            self.pool.terminate()

    def _unavailable(self, exc: BaseException, maybe_stored: bool = False) -> StoreUnavailable:
        detail = f"the database {self.location}: {type(exc).__name__}: {exc}"
        if isinstance(exc, asyncpg.CannotConnectNowError):
            public = "the database is starting up"
        elif isinstance(exc, TimeoutError):
            public = f"the database did not answer within {self.timeout:g} s"
        elif isinstance(exc, asyncpg.TooManyConnectionsError):
            public = "the database has no free connection"
        else:
            public = "the database is unavailable"
        return StoreUnavailable(public, detail, maybe_stored)

    async def _query(self, method: str, sql: str, *args):
        """``conn.<method>(sql, *args)`` on a pooled connection, within :attr:`timeout` (waiting
        for the connection included); raises :class:`StoreUnavailable` when the database is away
        or refuses writes."""
        try:
            async with asyncio.timeout_at(read_deadline(self.timeout)), self.pool.acquire() as conn:
                return await getattr(conn, method)(sql, *args)
        except CONNECTION_ERRORS as exc:
            raise self._unavailable(exc) from None
        except REFUSED_WRITES as exc:
            raise StoreUnavailable(READ_ONLY, f"the database {self.location}: {exc}") from None

    async def get_setting(self, key: str) -> str | None:
        return await self._query("fetchval", "SELECT value FROM settings WHERE key = $1", key)

    async def set_setting(self, key: str, value: str, replace: bool = True) -> str:
        conflict = "DO UPDATE SET value = excluded.value" if replace else "DO NOTHING"
        await self._query("execute", f"INSERT INTO settings VALUES ($1, $2) ON CONFLICT (key) {conflict}", key, value)
        return await self.get_setting(key)

    async def health(self) -> str | None:
        """None when a pooled connection answers within the timeout and the database takes writes
        (a primary out of recovery, its transactions not read-only by default); else why not, for
        anyone to read."""
        try:
            read_only = await self._query(
                "fetchval", "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'"
            )
        except StoreUnavailable as exc:
            log.warning("health check: %s", exc.detail)
            return str(exc)
        except asyncpg.PostgresError as exc:
            log.warning("health check: the database %s refused the check: %s", self.location, exc)
            return "the database cannot take writes"
        if read_only:
            log.warning("health check: the database %s is read-only", self.location)
            return READ_ONLY
        return None

    async def _insert_collection(self, collection_id, uid, spec_json, min_reports, created_at, enrollment) -> int | None:
        return await self._query(
            "fetchval",
            "INSERT INTO collections (id, uid, spec, min_reports, created_at, enrollment) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING key",
            collection_id,
            uid,
            spec_json,
            min_reports,
            created_at,
            enrollment,
        )

    async def _collection_row(self, collection_id) -> dict | None:
        sql = "SELECT key, id, uid, spec, min_reports, created_at, enrollment FROM collections WHERE id = $1"
        row = await self._query("fetchrow", sql, collection_id)
        return None if row is None else dict(row)

    async def _collection_ids(self, after="", limit=0) -> list[str]:
        rows = await self._query("fetch", "SELECT id FROM collections WHERE id > $1 ORDER BY id LIMIT $2", after, limit or None)
        return [r["id"] for r in rows]

    async def _partial_rows(self, key: int):
        try:
            async with asyncio.timeout_at(read_deadline(self.timeout)), self.pool.acquire() as conn, conn.transaction(
                isolation="repeatable_read", readonly=True
            ):  # one snapshot: counts and cells of the same commits
                counts = await conn.fetch(
                    "SELECT input, sum(n) FROM partial_counts WHERE collection = $1 GROUP BY input", key
                )
                # Per input, its cells and sums as two byte strings: no row object per cell.
                cells = await conn.fetch(
                    "SELECT input, string_agg(int4send(cell), ''::bytea ORDER BY cell), "
                    "string_agg(float8send(total), ''::bytea ORDER BY cell) FROM (SELECT input, cell, sum(value) "
                    "AS total FROM partial_cells WHERE collection = $1 GROUP BY input, cell) AS s GROUP BY input",
                    key,
                )
                dense = await conn.fetch("SELECT input, n, support FROM partials WHERE collection = $1", key)
        except CONNECTION_ERRORS as exc:
            raise self._unavailable(exc) from None
        cells = [
            (i, np.frombuffer(index, ">i4").astype(np.int64), np.frombuffer(value, ">f8").astype(np.float64))
            for i, index, value in cells
        ]
        return [tuple(r) for r in counts], cells, [tuple(r) for r in dense]

    async def counted(self, collection) -> int:
        return int(
            await self._query(
                "fetchval",
                "SELECT (SELECT coalesce(sum(n), 0) FROM partial_counts WHERE collection = $1) "
                "+ (SELECT coalesce(sum(n), 0) FROM partials WHERE collection = $1)",
                collection.key,
            )
        )

    async def report_counts(self) -> dict[str, int]:
        rows = await self._query(
            "fetch",
            "SELECT c.id, coalesce((SELECT sum(n) FROM partial_counts p WHERE p.collection = c.key), 0) "
            "+ coalesce((SELECT sum(n) FROM partials p WHERE p.collection = c.key), 0) AS n FROM collections c",
        )
        return {r["id"]: int(r["n"]) for r in rows}

    async def dummy_counts(self) -> dict[str, float]:
        rows = await self._query(
            "fetch",
            "SELECT c.id, sum(p.value) AS dummies FROM partial_cells p JOIN collections c ON c.key = p.collection "
            "WHERE p.input = $1 GROUP BY c.id", DUMMIES,
        )  # fmt: skip
        return {r["id"]: float(r["dummies"]) for r in rows}

    async def count_reports(self, collection) -> int:
        return await self._query("fetchval", "SELECT count(*) FROM reports WHERE collection = $1", collection.key)

    async def record_batch(self, collection, batch: str, size: int, dummies: int, junk: int) -> bool:
        inserted = await self._query(
            "fetchval",
            "INSERT INTO shuffled_batches VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1",
            collection.key, batch, size, dummies, junk,
        )  # fmt: skip
        return inserted is not None

    async def batch_totals(self, collection) -> dict[str, int]:
        row = await self._query(
            "fetchrow",
            "SELECT count(*) AS batches, coalesce(sum(size), 0) AS reports, coalesce(sum(dummies), 0) AS dummies, "
            "coalesce(sum(junk), 0) AS junk, coalesce(min(size - dummies), 0) AS smallest "
            "FROM shuffled_batches WHERE collection = $1",
            collection.key,
        )
        return {name: int(row[name]) for name in ("batches", "reports", "dummies", "junk", "smallest")}

    async def _stored_reports(self, key: int, input_index: int) -> list[tuple[bytes, object]]:
        sql = "SELECT report_id, value FROM reports WHERE collection = $1 AND input = $2"
        rows = await self._query("fetch", sql, key, input_index)
        return [(bytes(r["report_id"]), msgpack.unpackb(r["value"])) for r in rows]

    async def _stored_values(self, key: int, input_index: int | None = None) -> list[tuple[int, object]]:
        sql = "SELECT input, value FROM reports WHERE collection = $1"
        args = [key]
        if input_index is not None:
            sql += " AND input = $2"
            args.append(input_index)
        rows = await self._query("fetch", sql + " ORDER BY received_at, report_id", *args)
        return [(r["input"], msgpack.unpackb(r["value"])) for r in rows]

    async def _all_new(self, conn, merged, notes, now: float):
        """``(outcomes, partials, batches noted)`` if every report is new and was stored in one
        statement with its batch's row, else None (nothing stored)."""
        outcomes = {group: np.full(len(batch), NEW, dtype=np.int8) for group, batch in merged.items()}
        updates = self._updated_partials(merged, outcomes)
        keys, ids, inputs, values = [], [], [], []
        for (cid, i), batch, order in _in_lock_order(merged):
            key = self._collections[cid].key
            keys += [key] * len(batch)
            ids += [batch.report_ids[j] for j in order]
            inputs += [i] * len(batch)
            values += [msgpack.packb(batch.values[j]) for j in order]
        rows = self._batch_rows(notes, outcomes)
        figures = {self._collections[note.collection_id].key: self._own_statistics(self._collections[note.collection_id]).dummies
                   for note, _ in rows}  # fmt: skip
        try:
            written = await conn.fetch(
                ALL_NEW, keys, ids, inputs, values, now, self.instance, *self._columns(updates),
                *self._rows_columns(rows), list(figures), list(figures.values()),
            )  # fmt: skip
        except asyncpg.UniqueViolationError:
            return None
        if rows:
            failpoint(AFTER_BATCH_REPORTS)  # the reports and the row were one statement: both are in
        noted = self._written(rows, written)
        return outcomes, updates + self._dummies_updates(noted), noted

    @staticmethod
    def _rows_columns(rows) -> tuple[list, ...]:
        """The shuffled batches' rows (:meth:`Store._batch_rows`) as the arrays their insert unnests."""
        return tuple(map(list, zip(*(row for _, row in rows)))) if rows else ([], [], [], [], [])

    @staticmethod
    def _written(rows, written) -> list:
        """The batches of ``rows`` whose row the insert wrote (``written``: their keys it returned)."""
        keys = {(r["collection"], r["batch"]) for r in written}
        return [note for note, row in rows if (row[0], row[1]) in keys]

    @staticmethod
    def _columns(updates) -> tuple[list, ...]:
        """The partials' rows of ``updates`` as the arrays ALL_NEW unnests: counts (keys, inputs,
        n) and cells (keys, inputs, cells, sums)."""
        counted = [u for u in updates if u.input != DUMMIES]  # the dummies' partial is a cell, not a count
        counts = ([u.key for u in counted], [u.input for u in counted], [u.n for u in counted])
        cell_keys = [u.key for u in updates for _ in range(len(u.cells))]
        cell_inputs = [u.input for u in updates for _ in range(len(u.cells))]
        cells = [c for u in updates for c in u.cells.tolist()]
        sums = [v for u in updates for v in u.values.tolist()]
        return (*counts, cell_keys, cell_inputs, cells, sums)

    async def _transaction(self, merged, notes):
        """Raises :class:`StoreUnavailable` when the database is away, with ``maybe_stored`` once
        anything was sent (a commit's answer may be what was lost)."""
        now = time.time()
        sent = False
        try:
            async with asyncio.timeout(self.timeout):
                await self._hold()
                sent = True
                try:
                    for attempt in range(DEADLOCK_ATTEMPTS):
                        try:
                            return await self._attempt(self._conn, merged, notes, now)
                        except asyncpg.DeadlockDetectedError:
                            # Rolled back whole, so trying again cannot count anything twice.
                            if attempt == DEADLOCK_ATTEMPTS - 1:
                                raise
                            await asyncio.sleep(random.uniform(0.5, 1) * DEADLOCK_PAUSE * (attempt + 1))
                except BaseException as exc:
                    # An error the server reported leaves the connection usable (the transaction
                    # rolled back); any other (a broken link, a timeout, a cancellation mid-query)
                    # may not, so the pool checks it and opens a fresh one when it is asked again.
                    if not isinstance(exc, asyncpg.PostgresError) or isinstance(exc, CONNECTION_ERRORS):
                        await self._drop()
                    raise
        except CONNECTION_ERRORS as exc:
            raise self._unavailable(exc, maybe_stored=sent) from None
        except REFUSED_WRITES as exc:  # refused before anything was written: nothing stored
            raise StoreUnavailable(READ_ONLY, f"the database {self.location}: {exc}") from None

    async def _hold(self) -> None:
        """Make :attr:`_conn` an open connection of this lane's: the one it holds, unless the
        database closed it meanwhile (a restart, an idle timeout), else a fresh one from the pool."""
        if self._conn is not None:
            try:
                closed = self._conn.is_closed()
            except asyncpg.InterfaceError:  # closed, and asyncpg has already given it back to the pool
                self._conn = None
            else:
                if closed:
                    await self._drop()
        if self._conn is None:
            self._conn = await self.pool.acquire()

    async def _drop(self) -> None:
        """Give this lane's connection back to the pool, if it holds one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self.pool.release(conn)

    async def _attempt(self, conn, merged, notes, now: float):
        if all(batch.tokens is None for batch in merged.values()):
            done = await self._all_new(conn, merged, notes, now)
            if done is not None:
                return done
        return await self._row_by_row(conn, merged, notes, now)

    async def _row_by_row(self, conn, merged, notes, now: float):
        """The slower path (duplicates, tokens), in one transaction: nothing of it is stored or
        counted unless all of it is, the shuffled batches' rows with it."""
        outcomes: dict[tuple[str, int], np.ndarray] = {}
        async with conn.transaction():
            for (cid, i), batch, order in _in_lock_order(merged):
                key = self._collections[cid].key
                if batch.tokens is None:
                    outcomes[(cid, i)] = await self._insert(conn, key, batch, order, now)
                else:
                    outcomes[(cid, i)] = await self._insert_enrolled(conn, key, batch, now)
            updates = self._updated_partials(merged, outcomes)
            if updates:
                keys, inputs, n, cell_keys, cell_inputs, cells, sums = self._columns(updates)
                await conn.execute(UPSERT_COUNTS, keys, inputs, self.instance, n)
                await conn.execute(UPSERT_CELLS, cell_keys, cell_inputs, self.instance, cells, sums)
            noted = []
            rows = self._batch_rows(notes, outcomes)
            if rows:
                failpoint(AFTER_BATCH_REPORTS)
                noted = self._written(rows, await conn.fetch(NOTE_BATCHES, *self._rows_columns(rows)))
                dummies = self._dummies_updates(noted)
                if dummies:
                    _, _, _, cell_keys, cell_inputs, cells, sums = self._columns(dummies)
                    await conn.execute(UPSERT_CELLS, cell_keys, cell_inputs, self.instance, cells, sums)
                    updates += dummies
        return outcomes, updates, noted

    @staticmethod
    async def _stored(conn, key: int, report_ids: list[bytes], inserted: set[bytes]) -> dict[bytes, tuple[int, object]]:
        others = list({rid for rid in report_ids if rid not in inserted})
        if not others:
            return {}
        rows = await conn.fetch(STORED, key, others)
        return {r["report_id"]: (r["input"], msgpack.unpackb(r["value"])) for r in rows}

    async def _insert(self, conn, key: int, batch: IncomingBatch, order: list[int], now: float) -> np.ndarray:
        ids = [batch.report_ids[j] for j in order]
        packed = [msgpack.packb(batch.values[j]) for j in order]
        rows = await conn.fetch(INSERT_MANY, key, batch.input, now, ids, packed)
        if len(rows) == len(batch):
            return np.full(len(batch), NEW, dtype=np.int8)
        inserted = {r["report_id"] for r in rows}
        stored = await self._stored(conn, key, batch.report_ids, inserted)
        return classify(batch.report_ids, inserted, stored, batch.input, batch.values)

    async def _insert_enrolled(self, conn, key: int, batch: IncomingBatch, now: float) -> np.ndarray:
        """Row by row: a report is new only if both its id and its token's nonce are unused."""
        inserted: set[bytes] = set()
        token_used: list[int] = []
        for j, (rid, value, nonce) in enumerate(zip(batch.report_ids, batch.values, batch.tokens)):
            new = await conn.fetchval(
                "INSERT INTO reports VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING true",
                key,
                rid,
                batch.input,
                msgpack.packb(value),
                now,
            )
            if not new:
                continue
            claimed = await conn.fetchval(
                "INSERT INTO token_uses VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING true", key, nonce, rid
            )
            if claimed:
                inserted.add(rid)
            else:
                await conn.execute("DELETE FROM reports WHERE collection = $1 AND report_id = $2", key, rid)
                token_used.append(j)
        stored = await self._stored(conn, key, batch.report_ids, inserted)
        outcomes = classify(batch.report_ids, inserted, stored, batch.input, batch.values)
        outcomes[token_used] = TOKEN_USED
        return outcomes
