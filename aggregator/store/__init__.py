"""Persistence: one interface (:class:`Store`), two implementations: SQLite for one process on one
machine, PostgreSQL for any number of instances. :mod:`.base` holds the interface and the
argument for why nothing acknowledged is lost or counted twice; :mod:`.defaults` the database
settings the service and the command line share.

Imports: ``participant`` and :mod:`aggregator.estimation` (the statistics it keeps).
"""

from __future__ import annotations

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
from .postgres import PostgresStore, is_postgres_url
from .sqlite import SQLiteStore, StoreLocked


async def open_database(db: str, **options) -> Store:
    """The store at ``db``: a ``postgresql://`` URL (``options``: ``pool_size``, ``timeout``; see
    :meth:`PostgresStore.open`), or a SQLite file path (created if missing)."""
    if is_postgres_url(str(db)):
        return await PostgresStore.open(str(db), **options)
    return await SQLiteStore.open(db)


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
