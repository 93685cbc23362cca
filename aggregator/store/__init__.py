"""Persistence: one interface (:class:`Store`), two implementations: SQLite for one process on one
machine, PostgreSQL for any number of instances. :mod:`.base` holds the interface and the
argument for why nothing acknowledged is lost or counted twice; :mod:`.defaults` the database
settings the service and the command line share.

Imports: ``participant`` and :mod:`aggregator.estimation` (the statistics it keeps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from participant.lazy import lazy_exports

from .base import (
    CONFLICT,
    DUPLICATE,
    NEW,
    TOKEN_USED,
    Collection,
    CollectionExists,
    IncomingBatch,
    Store,
    StoreUnavailable,
)

# The implementations load their drivers (asyncpg; sqlite3 with numpy): imported on first use
# (PEP 562), so that reading the database defaults, as `--help` does, loads neither.
__getattr__, __dir__ = lazy_exports(__name__, {".postgres": ("PostgresStore", "is_postgres_url"),
                                                ".sqlite": ("SQLiteStore", "StoreLocked")})  # fmt: skip

if TYPE_CHECKING:
    from .postgres import PostgresStore, is_postgres_url
    from .sqlite import SQLiteStore, StoreLocked


async def open_database(db: str, **options) -> Store:
    """The store at ``db``: a ``postgresql://`` URL (``options``: ``pool_size``, ``timeout``; see
    :meth:`PostgresStore.open`), or a SQLite file path (created if missing; ``timeout``, see
    :meth:`SQLiteStore.open`)."""
    from .postgres import PostgresStore, is_postgres_url
    from .sqlite import SQLiteStore

    if is_postgres_url(str(db)):
        return await PostgresStore.open(str(db), **options)
    return await SQLiteStore.open(db, **{k: v for k, v in options.items() if k == "timeout"})


__all__ = [
    "CONFLICT",
    "DUPLICATE",
    "NEW",
    "TOKEN_USED",
    "Collection",
    "CollectionExists",
    "IncomingBatch",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StoreLocked",
    "StoreUnavailable",
    "is_postgres_url",
    "open_database",
]
