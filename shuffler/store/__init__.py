"""The shuffler's persistence: one interface (:mod:`.base`, with the argument for why nothing
acknowledged is lost, counted twice or released in a smaller batch), two implementations: SQLite
for one process (:mod:`.sqlite`, which also keeps no forwarded byte on disk) and PostgreSQL for
several instances on several machines (:mod:`.postgres`).

Imports: ``participant`` (views, specs).
"""

from __future__ import annotations

from .base import Batch, Store, StoreUnavailable, split, today


async def open_store(db: str) -> Store:
    """The store at ``db``: a ``postgresql://`` URL, or a SQLite file path (created mode 0600);
    raises :class:`StoreUnavailable`."""
    from .postgres import PostgresStore, is_postgres_url

    if is_postgres_url(db):
        try:
            import asyncpg  # noqa: F401 (the shuffler's extra brings it)
        except ImportError:
            raise StoreUnavailable("a PostgreSQL store needs asyncpg: pip install 'ldpnb[shuffler]'") from None
        return await PostgresStore.open(db)
    from .sqlite import SQLiteStore

    return SQLiteStore(db)


__all__ = ["Batch", "Store", "StoreUnavailable", "open_store", "split", "today"]
