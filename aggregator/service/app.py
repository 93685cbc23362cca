"""The aggregator's aiohttp application factory."""

from __future__ import annotations

import asyncio
import secrets

from aiohttp import web

from participant.addresses import within
from ..store import Store, open_database
from ..store.base import REQUEST_DEADLINE
from .answers import AnswerCache
from .auth import ENROLLMENT_KEY, SETTING_KEY, TokenError, check_admin_token, hash_token, new_token
from participant.serving import CappedRunner
from .errors import MAX_BODY, error_middleware, server_header
from .flags import refresher
from .collection_routes import routes as collection_routes
from .ingestion import REPORTS_PATH
from .ingestion import routes as ingestion_routes
from .model_answers import routes as model_routes
from .site import routes as site_routes
from .keys import (
    ADMIN_FAILURES,
    ANSWERS,
    CONFIG,
    ENROLLMENT_HMAC,
    FLAGS,
    LIMITER,
    METRICS,
    OPENER,
    SPEC_ANSWERS,
    STORE,
    WRITER,
    Config,
)
from .metrics import Metrics
from .opening import Opener, default_processes
from .origins import cors_headers, origin_middleware
from .ratelimit import RateLimiter
from .issuance import routes as issuance_routes
from .shuffled_reports import routes as shuffled_routes
from .writer import ReportWriter

ADMIN_FAILURES_PER_MINUTE = 10


async def settle_admin_token(store: Store, admin_token: str | None, rotate: bool = False) -> str | None:
    """Make sure ``store`` holds an admin token's hash; returns a generated token to show once, or None.

    A given ``admin_token`` must pass :func:`~aggregator.service.auth.check_admin_token`. On a database
    that already has a hash, a different token is refused unless ``rotate`` (its hash then
    replaces the stored one); without a token the stored hash is kept, or, on first start, a token
    is generated and only its hash is stored. Raises :class:`~aggregator.service.auth.TokenError`.
    """
    stored = await store.get_setting(SETTING_KEY)
    if admin_token is not None:
        check_admin_token(admin_token)
        wanted = hash_token(admin_token)
        if stored is None or rotate:
            await store.set_setting(SETTING_KEY, wanted)
        elif stored != wanted:
            raise TokenError(
                f"the database {store.location} has another admin token; pass --rotate-admin-token to replace it"
            )
        return None
    if rotate:
        raise TokenError("--rotate-admin-token needs the new token ($LDPNB_ADMIN_TOKEN or --admin-token-file)")
    if stored is not None:
        return None
    shown = new_token()
    # Instances starting together on a new database: the first hash stored wins; the others show nothing.
    if await store.set_setting(SETTING_KEY, hash_token(shown), replace=False) != hash_token(shown):
        return None
    return shown


async def open_store(
    db: str, admin_token: str | None = None, rotate: bool = False, **options
) -> tuple[Store, str | None]:
    """Open (creating if needed) the store at ``db`` (a SQLite path or a PostgreSQL URL, with
    ``options`` for PostgreSQL: ``pool_size``, ``timeout``), settle the admin token
    (:func:`settle_admin_token`) and the enrollment key. Returns ``(store, token to show or None)``."""
    store = await open_database(str(db), **options)
    try:
        shown = await settle_admin_token(store, admin_token, rotate)
        await store.set_setting(ENROLLMENT_KEY, secrets.token_hex(32), replace=False)
        await store.list_collections()  # every stored collection must load, or the service does not start
    except BaseException:
        await store.close()
        raise
    return store, shown


async def create_app(store: Store, config: Config | None = None) -> web.Application:
    """The service over ``store`` (whose settings hold the admin token's hash and the enrollment
    key); ``config`` sets its limits (:class:`~aggregator.service.keys.Config`)."""
    config = config or Config()
    if await store.get_setting(SETTING_KEY) is None:
        raise ValueError("the store has no admin token; open it with open_store()")
    enrollment_key = bytes.fromhex(await store.get_setting(ENROLLMENT_KEY))
    app = web.Application(
        middlewares=[origin_middleware, error_middleware, database_deadline], client_max_size=config.max_body_bytes
    )
    app[CONFIG] = config
    app[MAX_BODY] = config.max_body_bytes
    app.on_response_prepare.append(server_header)
    app.on_response_prepare.append(cors_headers)
    app[ENROLLMENT_HMAC] = enrollment_key
    if config.rate_limit:
        app[LIMITER] = RateLimiter(config.rate_limit)
    app[ADMIN_FAILURES] = RateLimiter(ADMIN_FAILURES_PER_MINUTE)
    app[STORE] = store
    app[METRICS] = Metrics(per_collection=config.metrics_per_collection)
    app[ANSWERS] = AnswerCache()
    app[SPEC_ANSWERS] = AnswerCache(size=256, max_bytes=128 * 2**20)
    app[FLAGS] = {}
    app.on_shutdown.append(_stop_builds)
    # aiohttp tries the routes that share a prefix ("/collections") in the order they were added:
    # the reports route, which nearly every request takes, goes first.
    app.add_routes(sorted(ingestion_routes, key=lambda route: getattr(route, "path", "") != REPORTS_PATH))
    app.add_routes(collection_routes)
    app.add_routes(model_routes)
    app.add_routes(site_routes)
    app.add_routes(shuffled_routes)
    app.add_routes(issuance_routes)
    app.cleanup_ctx.append(_writer_context)
    app.cleanup_ctx.append(refresher)
    app.cleanup_ctx.append(_opener_context)
    return app


async def _stop_builds(app: web.Application) -> None:
    """On stop, before requests under way are waited for: no answer still being built is
    finished (a wide model takes seconds of a core); its requests are told to come back."""
    app[ANSWERS].close()
    app[SPEC_ANSWERS].close()


async def _opener_context(app: web.Application):
    app[OPENER] = Opener(app[CONFIG].open_processes or default_processes())
    yield
    app[OPENER].close()


@web.middleware
async def database_deadline(request: web.Request, handler):
    """Every read a request makes ends by one ``--db-timeout`` after it began, all of them together."""
    deadline = asyncio.get_running_loop().time() + request.app[CONFIG].db_timeout
    token = REQUEST_DEADLINE.set(deadline)
    try:
        return await handler(request)
    finally:
        REQUEST_DEADLINE.reset(token)


async def _writer_context(app: web.Application):
    writer = ReportWriter(app[STORE], app[CONFIG].db_timeout)
    app[WRITER] = writer
    writer.start()
    yield
    await writer.stop()


async def start_site(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, sock=None
) -> tuple[web.AppRunner, str]:
    """Start serving ``app`` (on ``sock`` if given, a listening socket shared by worker
    processes); returns the runner (``await runner.cleanup()`` stops it) and the base URL bound
    (port 0 picks a free port)."""
    config = app.get(CONFIG) or Config()
    runner = CappedRunner(
        app,
        config.max_connections,
        config.max_connections_per_address,
        lambda peer: within(peer, config.trusted_proxies),
        config.slot_prefix,
        access_log=None,
        # Request bodies are never inflated: a small compressed body could expand without bound
        # inside the parser, before any handler could refuse it.
        auto_decompress=False,
        keepalive_timeout=config.keepalive_timeout,
        # On stop, a request under way has the database deadline and a second to finish; a model
        # still building past that is not waited for.
        shutdown_timeout=config.db_timeout + 1.0,
        max_line_size=config.max_header_bytes,
        max_field_size=config.max_header_bytes,
    )
    await runner.setup()
    if sock is not None:
        site = web.SockSite(runner, sock)
    else:
        # A deep accept backlog: load tests open hundreds of connections at once.
        site = web.TCPSite(runner, host, port, backlog=2048, reuse_port=None)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    if ":" in bound_host:
        bound_host = f"[{bound_host}]"
    return runner, f"http://{bound_host}:{bound_port}"
