"""The database settings' defaults, apart from the drivers, so that the command line shows them
without loading asyncpg or the SQLite store."""

#: Seconds a query, a connection or a wait for a free pooled connection may take before the
#: request is answered 503 (``serve --db-timeout``).
DEFAULT_TIMEOUT = 5.0
#: Transactions of reports a PostgreSQL process keeps in flight, each through a connection of
#: its own, held from the pool (:attr:`aggregator.store.postgres.PostgresStore.write_lanes`).
POSTGRES_WRITE_LANES = 2
#: Connections each process opens, all at start (``serve --db-pool``): one per write lane, the
#: rest for reads.
DEFAULT_POOL = 4
