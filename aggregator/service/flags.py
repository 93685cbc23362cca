"""The plausibility flags ``/metrics`` reports, kept off every request's path.

A flag needs a collection's full statistics (a million cells for the largest), so no scrape
computes one. A scrape starts, when none runs and the last began :data:`REFRESH` seconds ago or
more, a background pass that refreshes the flag of every collection whose count of reports
changed, one collection at a time, reading its statistics and checking them on worker threads
(a service nobody scrapes does none of this work); an admin's ``status`` or ``plausibility``
read, which computes the checks anyway, records its flag too. ``/metrics`` itself reads only the
per-collection report counts (one query) and the flags known.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from ..estimation.plausibility import plausibility
from .keys import FLAGS, STORE

REFRESH = 10.0  # seconds between two passes over the collections
log = logging.getLogger(__name__)


def implausible(stats) -> bool:
    """Whether the statistics are flagged implausible (False when the checks cannot run on them)."""
    try:
        return bool(plausibility(stats)["flagged"])
    except (ArithmeticError, ValueError):  # one collection's numbers never break the page
        return False


async def refresh(app: web.Application) -> None:
    """One pass: the flag of every collection whose report count changed since its flag."""
    store, flags = app[STORE], app[FLAGS]
    counts = await store.report_counts()
    for collection in await store.list_collections():
        counted = counts.get(collection.id, 0)
        known = flags.get(collection.id)
        if known is not None and known[0] == counted:
            continue
        stats = await store.statistics(collection)
        flags[collection.id] = (counted, await asyncio.to_thread(implausible, stats))


class Refresher:
    """Starts background passes of :func:`refresh`, at most one at a time and one per :data:`REFRESH` seconds."""

    def __init__(self):
        self.task: asyncio.Task | None = None
        self.began = -REFRESH

    def poke(self, app: web.Application) -> None:
        """Start a pass unless one runs or began less than :data:`REFRESH` seconds ago."""
        now = asyncio.get_running_loop().time()
        if (self.task is None or self.task.done()) and now - self.began >= REFRESH:
            self.began = now
            self.task = asyncio.ensure_future(self._pass(app))

    @staticmethod
    async def _pass(app: web.Application) -> None:
        try:
            await refresh(app)
        except Exception as exc:  # noqa: BLE001 (a failed pass is retried at a later scrape)
            log.warning("refreshing the plausibility flags failed: %s", type(exc).__name__)


REFRESHER = web.AppKey("flag_refresher", Refresher)


async def refresher(app: web.Application):
    """A cleanup context: the app's :class:`Refresher`, its pass cancelled when the app stops."""
    app[REFRESHER] = Refresher()
    yield
    task = app[REFRESHER].task
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
