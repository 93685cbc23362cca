"""The shared store: one PostgreSQL database for any number of shuffler instances, on any number of
machines (``python -m shuffler serve --db postgresql://…``).

Every instance takes reports (:meth:`PostgresStore.add`, one transaction per group) and answers
views; each release round, an instance releases and forwards a collection only while it holds
that collection's advisory lock (:meth:`PostgresStore.holding`, a session lock on a connection
of its own: an instance that dies, or loses its connection, lets go of it at once). The
guarantees of :mod:`.base` hold whatever runs at once: a release is one transaction that moves
reports from ``waiting`` into a batch (``FOR UPDATE`` on the rows it takes), and a batch is
deleted only by the transaction that records its acknowledgement.

A report is taken at most once, whatever instances run at once: :meth:`PostgresStore.add` inserts
into ``waiting`` first and only then looks for the digests it inserted among those released, so a
release committing between the two (it moved those very bytes into a batch) is seen, and the copy
just inserted is taken back in the same transaction. The released set is written, as in every
store, at release in each batch's drawn order (people's and dummies' alike), so its rows' places
follow that order.

What this store does not promise, where the SQLite one does: PostgreSQL keeps deleted rows in
their pages until vacuumed and overwritten, lays new rows in the order they arrive, and keeps its
write-ahead log until the segments are recycled, and it has no secure delete: so its files hold
waiting and forwarded reports' bytes, in arrival order, for a while after their release. Keep its
data on storage the aggregator's operator cannot read (the shuffler's operator's own machine or
volume).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from contextlib import asynccontextmanager

from participant.spec import CollectionSpec
from participant.view import ShuffledView

from .base import Batch, Store, StoreUnavailable, split, today

SCHEMA = """
CREATE TABLE IF NOT EXISTS views (
    id text PRIMARY KEY, uid text NOT NULL, spec text NOT NULL, min_batch bigint NOT NULL,
    dummies bigint NOT NULL, forwarded bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS seen (
    collection text NOT NULL, digest bytea NOT NULL, released integer NOT NULL, PRIMARY KEY (collection, digest));
CREATE INDEX IF NOT EXISTS seen_released ON seen (released);
CREATE TABLE IF NOT EXISTS waiting (
    collection text NOT NULL, digest bytea NOT NULL, sealed bytea NOT NULL, PRIMARY KEY (collection, digest));
CREATE TABLE IF NOT EXISTS batches (
    id bigserial PRIMARY KEY, name text NOT NULL, collection text NOT NULL, people integer NOT NULL,
    dummies integer NOT NULL, padding integer NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS closed (collection text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS batch_reports (
    batch bigint NOT NULL, position integer NOT NULL, sealed bytea NOT NULL, PRIMARY KEY (batch, position));
"""
MIGRATION_LOCK = 0x6C64706E6273  # "ldpnbs": instances starting together create the schema one at a time
# An earlier layout's released set held people's digests alone, written at arrival (a re-post told a
# person's forwarded report from a dummy's): it is dropped, as the SQLite store drops its own.
UPGRADE = """
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'seen')
       AND NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                       AND table_name = 'seen' AND column_name = 'released') THEN
        DROP TABLE seen;
    END IF;
END $$;
"""
NEW_WAITING = (
    "INSERT INTO waiting SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[]) ON CONFLICT DO NOTHING "
    "RETURNING collection, digest"
)
RELEASED_AMONG = (
    "SELECT s.collection, s.digest FROM seen s JOIN unnest($1::text[], $2::bytea[]) AS t(c, d) "
    "ON s.collection = t.c AND s.digest = t.d"
)


def is_postgres_url(text: str) -> bool:
    return str(text).startswith(("postgresql://", "postgres://"))


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"the shuffler's database is unavailable ({type(exc).__name__})")


class PostgresStore(Store):
    """The store in the database at ``url``; open with :meth:`open`."""

    def __init__(self, url: str, pool):
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.location = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self.pool = pool

    @classmethod
    async def open(cls, url: str, pool_size: int = 10) -> PostgresStore:
        """The store at ``url``, its schema created if missing; raises :class:`StoreUnavailable`."""
        import asyncpg

        try:
            pool = await asyncpg.create_pool(url, min_size=1, max_size=pool_size, timeout=10)
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                await conn.execute(UPGRADE)
                await conn.execute(SCHEMA)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise StoreUnavailable(f"cannot open the shuffler's database: {type(exc).__name__}: {exc}"[:300]) from None
        return cls(url, pool)

    async def shut(self) -> None:
        await self.pool.close()

    async def _run(self, work):
        """``await work(conn)`` on a pooled connection; StoreUnavailable when the database is away."""
        import asyncpg

        try:
            async with self.pool.acquire() as conn:
                return await work(conn)
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.CannotConnectNowError,
                asyncpg.AdminShutdownError, TimeoutError) as exc:  # fmt: skip
            raise _unavailable(exc) from None

    # views

    @staticmethod
    def _view(row) -> ShuffledView | None:
        if row is None:
            return None
        return ShuffledView(row["id"], row["uid"], CollectionSpec.from_json(row["spec"]), row["min_batch"], row["dummies"])

    async def view(self, collection_id):
        return self._view(await self._run(lambda c: c.fetchrow("SELECT * FROM views WHERE id = $1", collection_id)))

    async def pin(self, view):
        async def work(conn):
            await conn.execute(
                "INSERT INTO views (id, uid, spec, min_batch, dummies) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                view.collection, view.uid, json.dumps(view.spec.to_dict()), view.min_batch, view.dummies,
            )  # fmt: skip
            return await conn.fetchrow("SELECT * FROM views WHERE id = $1", view.collection)

        return self._view(await self._run(work))

    async def views(self):
        return [self._view(row) for row in await self._run(lambda c: c.fetch("SELECT * FROM views ORDER BY id"))]

    async def forwarded_count(self, collection_id):
        found = await self._run(lambda c: c.fetchval("SELECT forwarded FROM views WHERE id = $1", collection_id))
        return found or 0

    # reports

    async def add(self, items):
        first: dict[tuple[str, bytes], int] = {}
        keys = []
        for i, (collection, sealed) in enumerate(items):
            key = (collection, hashlib.sha256(sealed).digest())
            keys.append(key)
            first.setdefault(key, i)
        unique = list(first)

        collections = sorted({k[0] for k in unique})

        async def work(conn):
            async with conn.transaction():
                # A share lock on each view's row: adds run side by side, and close (FOR UPDATE)
                # waits for those under way and holds back those after it until it commits.
                await conn.execute("SELECT 1 FROM views WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE", collections)
                rows = await conn.fetch("SELECT collection FROM closed WHERE collection = ANY($1::text[])", collections)
                closed = {r["collection"] for r in rows}
                # In key order: two groups holding the same reports wait for each other one way round.
                open_ = sorted(k for k in unique if k[0] not in closed)
                rows = await conn.fetch(
                    NEW_WAITING, [k[0] for k in open_], [k[1] for k in open_], [items[first[k]][1] for k in open_]
                )
                inserted = {(r["collection"], bytes(r["digest"])) for r in rows}
                if inserted:  # released before, or by a release that committed while this insert waited on it
                    again = await conn.fetch(RELEASED_AMONG, [k[0] for k in inserted], [k[1] for k in inserted])
                    again = {(r["collection"], bytes(r["digest"])) for r in again}
                    if again:
                        await conn.execute(
                            "DELETE FROM waiting w USING unnest($1::text[], $2::bytea[]) AS t(c, d) "
                            "WHERE w.collection = t.c AND w.digest = t.d",
                            [k[0] for k in again], [k[1] for k in again],
                        )  # fmt: skip
                        inserted -= again
                return inserted, closed

        new, closed = await self._run(work)
        return [None if key[0] in closed else key in new and first[key] == i for i, key in enumerate(keys)]

    async def waiting(self, collection_id):
        return await self._run(lambda c: c.fetchval("SELECT count(*) FROM waiting WHERE collection = $1", collection_id))

    async def waiting_all(self):
        rows = await self._run(lambda c: c.fetch("SELECT collection, count(*) AS n FROM waiting GROUP BY collection"))
        return {r["collection"]: r["n"] for r in rows}

    # batches

    async def release(self, collection_id, floor, cap, dummies, padding=0):
        random = secrets.SystemRandom()
        day = today()

        async def work(conn):
            drawn = []
            async with conn.transaction():
                rows = await conn.fetch(
                    "SELECT digest, sealed FROM waiting WHERE collection = $1 FOR UPDATE SKIP LOCKED", collection_id
                )
                rows = [(bytes(r["digest"]), bytes(r["sealed"])) for r in rows]
                random.shuffle(rows)
                taken = []
                for b, (people, blanket) in enumerate(zip(split(rows, floor, cap, len(dummies)), dummies)):
                    sealed = [s for _, s in people] + list(blanket)
                    random.shuffle(sealed)
                    batch = await conn.fetchval(
                        "INSERT INTO batches (name, collection, people, dummies, padding) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                        secrets.token_hex(16), collection_id, len(people), len(blanket), padding if b == 0 else 0,
                    )  # fmt: skip
                    await conn.execute(
                        "INSERT INTO batch_reports SELECT $1, p, s FROM unnest($2::int[], $3::bytea[]) AS t(p, s)",
                        batch, list(range(len(sealed))), sealed,
                    )  # fmt: skip
                    # People's and dummies' digests alike, in the drawn order (see the module's text).
                    await conn.execute(
                        "INSERT INTO seen SELECT $1, d, $3 FROM unnest($2::bytea[]) AS t(d) ON CONFLICT DO NOTHING",
                        collection_id, [hashlib.sha256(item).digest() for item in sealed], day,
                    )  # fmt: skip
                    taken += [d for d, _ in people]
                    drawn.append(batch)
                if taken:
                    await conn.execute(
                        "DELETE FROM waiting WHERE collection = $1 AND digest = ANY($2::bytea[])", collection_id, taken
                    )
            return drawn

        return await self._run(work)

    async def close(self, collection_id):
        async def work(conn):
            async with conn.transaction():
                await conn.execute("SELECT 1 FROM views WHERE id = $1 FOR UPDATE", collection_id)
                await conn.execute("INSERT INTO closed VALUES ($1) ON CONFLICT DO NOTHING", collection_id)

        await self._run(work)

    async def closed(self, collection_id):
        return bool(await self._run(lambda c: c.fetchval("SELECT 1 FROM closed WHERE collection = $1", collection_id)))

    async def forget(self, collection_id):
        await self._run(lambda c: c.execute("DELETE FROM seen WHERE collection = $1", collection_id))

    async def expire(self, before_day):
        done = await self._run(lambda c: c.execute("DELETE FROM seen WHERE released < $1", before_day))
        return int(done.split()[-1])

    async def writable(self):
        if await self._run(lambda c: c.fetchval("SHOW transaction_read_only")) == "on":
            raise StoreUnavailable("the shuffler's database is read-only")

    async def in_flight(self):
        rows = await self._run(lambda c: c.fetch("SELECT id, collection FROM batches ORDER BY id"))
        return [(r["id"], r["collection"]) for r in rows]

    async def batch(self, batch):
        async def work(conn):
            head = await conn.fetchrow("SELECT * FROM batches WHERE id = $1", batch)
            if head is None:
                return None
            sealed = await conn.fetch("SELECT sealed FROM batch_reports WHERE batch = $1 ORDER BY position", batch)
            return Batch(
                batch, head["name"], head["collection"], head["people"], head["dummies"],
                [bytes(r["sealed"]) for r in sealed], head["padding"],
            )  # fmt: skip

        return await self._run(work)

    async def forwarded(self, batch):
        async def work(conn):
            async with conn.transaction():
                row = await conn.fetchrow("DELETE FROM batches WHERE id = $1 RETURNING collection, people", batch)
                if row is None:  # another instance recorded it
                    return
                await conn.execute("DELETE FROM batch_reports WHERE batch = $1", batch)
                await conn.execute("UPDATE views SET forwarded = forwarded + $2 WHERE id = $1", row["collection"], row["people"])

        await self._run(work)

    @asynccontextmanager
    async def holding(self, collection_id: str):
        """This instance alone releases and forwards the collection while it holds a session
        advisory lock on it, on a connection of its own (released at the end, or by the database
        when the connection goes)."""
        import asyncpg

        try:
            conn = await self.pool.acquire()
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise _unavailable(exc) from None
        key = "ldpnb shuffler " + collection_id
        try:
            held = await conn.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key)
            try:
                yield held
            finally:
                if held:
                    try:
                        await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
                    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                        pass  # the connection went: the database let go of the lock with it
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
            raise _unavailable(exc) from None
        finally:
            await self.pool.release(conn)
