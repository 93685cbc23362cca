"""The service's own pages: health, Prometheus metrics, the status page, its icon, the OpenAPI description."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from .collection_routes import people_of
from .errors import RETRY_AFTER
from .flags import REFRESHER
from .keys import CONFIG, FLAGS, METRICS, STORE, WRITER
from .plumbing import off_loop

routes = web.RouteTableDef()
OPENAPI_PATH = Path(__file__).with_name("openapi.json")


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """200 when the database takes reads and writes; 503 naming the reason otherwise: the
    database is away, read-only, or holding writes (one in flight or refused within the timeout),
    or its check did not answer within the timeout (answered then, the check left to finish)."""
    timeout = request.app[CONFIG].db_timeout
    problem = request.app[WRITER].problem()
    if problem is None:
        check = asyncio.ensure_future(request.app[STORE].health())
        try:
            problem = await asyncio.wait_for(asyncio.shield(check), timeout)
        except TimeoutError:
            check.add_done_callback(lambda done: done.cancelled() or done.exception())
            problem = f"the database did not answer within {timeout:g} s"
    if problem is not None:
        return web.json_response(
            {"status": "unavailable", "reason": problem}, status=503, headers={"Retry-After": RETRY_AFTER}
        )
    return web.json_response({"status": "ok"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """The counters in Prometheus's text format, from the per-collection report counts (one query)
    and the plausibility flags :mod:`~aggregator.service.flags` keeps (never computed here: the
    scrape starts their refresh in the background); the text is rendered off the loop."""
    request.app[REFRESHER].poke(request.app)
    counts = await request.app[STORE].report_counts()
    dummies = await request.app[STORE].dummy_counts()
    people = {cid: people_of(n, dummies.get(cid, 0.0)) for cid, n in counts.items()}
    flags = {cid: flagged for cid, (_, flagged) in request.app[FLAGS].items()}
    body = await off_loop(request.app[METRICS].render, counts, flags, people)
    return web.Response(body=body, content_type="text/plain", charset="utf-8", headers={"X-Format": "prometheus-0.0.4"})


PAGE_PATH = Path(__file__).with_name("page.html")


@routes.get("/")
@routes.get("/collections/{collection_id}/view")
async def page(request: web.Request) -> web.Response:
    """The status page for people: static HTML whose script reads the JSON routes (the admin
    parts with the token the person enters, kept in the tab's session storage)."""
    return web.Response(
        body=PAGE_PATH.read_bytes(),
        content_type="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            "Referrer-Policy": "no-referrer",
        },
    )


FAVICON_PATH = Path(__file__).with_name("favicon.svg")


@routes.get("/favicon.svg")
@routes.get("/favicon.ico")  # asked for by browsers whatever the page says
async def favicon(request: web.Request) -> web.Response:
    return web.Response(
        body=FAVICON_PATH.read_bytes(), content_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"}
    )


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=OPENAPI_PATH.read_bytes(), content_type="application/json")
