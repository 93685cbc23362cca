"""The aggregator's aiohttp application factory."""

from __future__ import annotations

import secrets
from pathlib import Path

from aiohttp import web

from .auth import ENROLLMENT_KEY, SETTING_KEY, hash_token, new_token
from .errors import error_middleware
from .handlers import routes
from .keys import CONFIG, LIMITER, METRICS, STORE, WRITER, Config
from .metrics import Metrics
from .ratelimit import RateLimiter
from .store import Store
from .writer import ReportWriter


def open_store(db_path: str | Path, admin_token: str | None = None) -> tuple[Store, str | None]:
    """Open (creating if needed) the SQLite store and settle the admin token.

    With ``admin_token`` its hash replaces the stored one. Without it the stored hash is kept,
    or, on first start, a token is generated: it is returned (to be shown once) and only its hash
    is stored. Returns ``(store, token to show or None)``.
    """
    store = Store(db_path)
    shown = None
    if admin_token is not None:
        store.set_setting(SETTING_KEY, hash_token(admin_token))
    elif store.get_setting(SETTING_KEY) is None:
        shown = new_token()
        store.set_setting(SETTING_KEY, hash_token(shown))
    if store.get_setting(ENROLLMENT_KEY) is None:
        store.set_setting(ENROLLMENT_KEY, secrets.token_hex(32))
    return store, shown


def create_app(
    store: Store, max_body_bytes: int = 8 * 1024 * 1024, max_batch: int = 10_000, rate_limit: int = 0
) -> web.Application:
    """The service over ``store`` (whose settings hold the admin token's hash). ``rate_limit``
    caps the reports one address may send to one collection per minute (0: no cap); past it the
    service answers 429 with Retry-After."""
    token_hash = store.get_setting(SETTING_KEY)
    if token_hash is None:
        raise ValueError("the store has no admin token; open it with open_store()")
    app = web.Application(middlewares=[error_middleware], client_max_size=max_body_bytes)
    app[CONFIG] = Config(
        token_hash, max_body_bytes, max_batch, rate_limit, bytes.fromhex(store.get_setting(ENROLLMENT_KEY))
    )
    if rate_limit:
        app[LIMITER] = RateLimiter(rate_limit)
    app[STORE] = store
    app[METRICS] = Metrics()
    app.add_routes(routes)
    app.cleanup_ctx.append(_writer_context)
    return app


async def _writer_context(app: web.Application):
    writer = ReportWriter(app[STORE])
    app[WRITER] = writer
    writer.start()
    yield
    await writer.stop()


async def start_site(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start serving ``app``; returns the runner (``await runner.cleanup()`` stops it) and the
    base URL actually bound (port 0 picks a free port)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    # A deep accept backlog: load tests open hundreds of connections at once.
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    if ":" in bound_host:
        bound_host = f"[{bound_host}]"
    return runner, f"http://{bound_host}:{bound_port}"
