"""Moving a SQLite database into PostgreSQL: ``python -m aggregator copy --from FILE --to URL``."""

from __future__ import annotations

import msgpack

from ..store.base import DUMMIES
from ..store.postgres import PostgresStore
from ..store.sqlite import SQLiteStore

CHUNK = 50_000


class CopyError(Exception):
    """The copy cannot proceed; nothing was written to the target."""


async def copy_database(source: str, target: str) -> str:
    """Copy every setting, collection, report and enrollment-token use of the SQLite file
    ``source`` into the PostgreSQL database ``target``, in one transaction; the statistics there
    are recomputed from the copied reports. Refuses (:class:`CopyError`) a target that already
    holds one of the collections. Returns a one-line summary."""
    sqlite = await SQLiteStore.open(source)
    try:
        postgres = await PostgresStore.open(target)
        try:
            return await _copy(sqlite, postgres)
        finally:
            await postgres.close()
    finally:
        await sqlite.close()


async def _copy(sqlite: SQLiteStore, postgres: PostgresStore) -> str:
    collections = await sqlite.list_collections()
    settings = sqlite.db.execute("SELECT key, value FROM settings WHERE key != 'schema_version'").fetchall()
    reports = 0
    async with postgres.pool.acquire() as conn, conn.transaction():
        clash = await conn.fetch("SELECT id FROM collections WHERE id = ANY($1::text[])", [c.id for c in collections])
        if clash:
            names = ", ".join(r["id"] for r in clash)
            raise CopyError(f"{postgres.location} already holds collections {names}; nothing was copied")
        await conn.executemany(
            "INSERT INTO settings VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", settings
        )
        for collection in collections:
            key = await conn.fetchval(
                "INSERT INTO collections (id, uid, spec, min_reports, created_at, enrollment) "
                "VALUES ($1, $2, $3, $4, $5, $6) RETURNING key",
                collection.id,
                collection.uid,
                collection.spec.to_json(),
                collection.min_reports,
                collection.created_at,
                collection.enrollment,
            )
            cursor = sqlite.db.execute(
                "SELECT report_id, input, value, received_at FROM reports WHERE collection = ?", [collection.key]
            )
            while rows := cursor.fetchmany(CHUNK):
                await conn.copy_records_to_table(
                    "reports",
                    records=[(key, rid, i, msgpack.packb(v), t) for rid, i, v, t in rows],
                    columns=["collection", "report_id", "input", "value", "received_at"],
                )
                reports += len(rows)
            uses = sqlite.db.execute(
                "SELECT nonce, report_id FROM token_uses WHERE collection = ?", [collection.key]
            ).fetchall()
            if uses:
                await conn.copy_records_to_table(
                    "token_uses", records=[(key, n, r) for n, r in uses], columns=["collection", "nonce", "report_id"]
                )
            stats = await sqlite.recompute_statistics(collection)
            await conn.executemany(
                "INSERT INTO partials VALUES ($1, $2, 'copy', $3, $4)",
                [(key, i, s.n, s.support.tobytes()) for i, s in enumerate(stats.states) if s.n],
            )
            # The dummies a shuffler's batches added are not in the reports: carried from the partials.
            dummies = (await sqlite.statistics(collection)).dummies
            if dummies:
                await conn.execute("INSERT INTO partial_cells VALUES ($1, $2, 'copy', 0, $3)", key, DUMMIES, dummies)
            batches = sqlite.db.execute(
                "SELECT batch, size, dummies, junk FROM shuffled_batches WHERE collection = ?", [collection.key]
            ).fetchall()
            if batches:
                await conn.executemany("INSERT INTO shuffled_batches VALUES ($1, $2, $3, $4, $5)", [(key, *b) for b in batches])
    return f"copied {len(collections)} collections, {reports} reports and {len(settings)} settings to {postgres.location}"
