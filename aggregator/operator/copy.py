"""Moving a SQLite database into PostgreSQL: ``python -m aggregator copy --from FILE --to URL``."""

from __future__ import annotations

import msgpack

from ..store.base import DUMMIES
from ..store.postgres import PostgresStore
from ..store.sqlite import SQLiteStore

CHUNK = 50_000


class CopyError(Exception):
    """The copy cannot proceed; nothing was written to the target."""


# What each setting is, for the one line that names a clash.
SETTING_NAMES = {
    "admin_token_sha256": "admin token",
    "enrollment_hmac_key": "enrollment key",
    "sealing_keys": "sealing keys",
}


def _named(key: str) -> str:
    return SETTING_NAMES.get(key, key)


async def copy_database(source: str, target: str, settings: str | None = None) -> str:
    """Copy every setting, collection, report and enrollment-token use of the SQLite file
    ``source`` into the PostgreSQL database ``target``, in one transaction; the statistics there
    are recomputed from the copied reports. Refuses (:class:`CopyError`) a target that already
    holds one of the collections, and a target whose own settings (its admin token, enrollment
    key, sealing keys) differ from the file's unless ``settings`` says whose to keep: ``"target"``
    (refused if a copied collection needs the file's enrollment or sealing key) or ``"source"``.
    Returns a one-line summary."""
    sqlite = await SQLiteStore.open(source)
    try:
        postgres = await PostgresStore.open(target)
        try:
            return await _copy(sqlite, postgres, settings)
        finally:
            await postgres.close()
    finally:
        await sqlite.close()


def _needing(collections, key: str) -> list[str]:
    """The copied collections that cannot work without the file's own value of ``key``."""
    if key == "enrollment_hmac_key":
        return [c.id for c in collections if c.enrollment]
    if key == "sealing_keys":
        return [c.id for c in collections if c.spec.shuffle is not None]
    return []


async def _copy(sqlite: SQLiteStore, postgres: PostgresStore, keep: str | None = None) -> str:
    collections = await sqlite.list_collections()
    settings = sqlite.db.execute("SELECT key, value FROM settings WHERE key != 'schema_version'").fetchall()
    reports = 0
    async with postgres.pool.acquire() as conn, conn.transaction():
        clash = await conn.fetch("SELECT id FROM collections WHERE id = ANY($1::text[])", [c.id for c in collections])
        if clash:
            names = ", ".join(r["id"] for r in clash)
            raise CopyError(f"{postgres.location} already holds collections {names}; nothing was copied")
        held = dict(await conn.fetch("SELECT key, value FROM settings WHERE key = ANY($1::text[])", [k for k, _ in settings]))
        differ = [k for k, v in settings if k in held and held[k] != v]
        if differ and keep is None:
            raise CopyError(
                f"{postgres.location} has settings of its own that differ from the file's (its {', '.join(map(_named, differ))}); "
                "nothing was copied: pass --keep-target-settings to keep the target's (its admin token stays) or "
                "--take-source-settings to replace them with the file's"
            )
        if keep == "target":
            needs = {k: ids for k in differ if (ids := _needing(collections, k))}
            if needs:
                k, ids = next(iter(needs.items()))
                raise CopyError(
                    f"collections {', '.join(ids)} need the file's {_named(k)}; nothing was copied: "
                    "pass --take-source-settings, then serve with --rotate-admin-token to set your admin token"
                )
        conflict = "DO NOTHING" if keep == "target" else "(key) DO UPDATE SET value = excluded.value"
        await conn.executemany(f"INSERT INTO settings VALUES ($1, $2) ON CONFLICT {conflict}", settings)
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
    kept = f" (kept the target's {', '.join(map(_named, differ))})" if differ and keep == "target" else ""
    taken = f" (the file's {', '.join(map(_named, differ))} replaced the target's)" if differ and keep == "source" else ""
    return (
        f"copied {len(collections)} collections, {reports} reports and {len(settings)} settings to "
        f"{postgres.location}{kept}{taken}"
    )
