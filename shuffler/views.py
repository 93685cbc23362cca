"""Pinning a collection's view: what the shuffler holds a collection to, learnt from the aggregator once.

The first time anyone asks for a collection the shuffler has no view of (a device fetching its
view, or posting a report), the shuffler fetches it from the aggregator (``GET
{aggregator}/collections/{id}``): it must be shuffled, name a sealing key, and fit in the
aggregator's published request limits as batches of at least its floor. The view pinned holds
the collection's id, uid and spec, and the larger of the spec's and the shuffler's own batch
floor and dummies (:func:`least_dummies`); it is never fetched again, so what the aggregator shows later (another spec
under the same id, a lower floor) changes nothing here, and devices refuse a collection whose
aggregator answer differs from the view (:mod:`participant.view`).

An id the aggregator does not know is remembered as unknown for :data:`UNKNOWN_FOR` seconds, so
that posts to made-up ids cost the aggregator one request each per interval, not one each.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

import aiohttp

from participant import tokens
from participant.errors import ParticipantError
from participant.reasons import failure_reason
from participant.sealing import sealed_length
from participant.spec import CollectionSpec
from participant.view import ShuffledView
from protocols.shuffling import default_dummies

from .problems import Problem
from .store import StoreUnavailable

UNKNOWN_FOR = 30.0  # seconds an id the aggregator does not know stays unknown here
UNKNOWN_KEPT = 10_000  # ids remembered as unknown at once (the oldest forgotten first)
# Bytes of a batch request besides its reports, and per report (msgpack's bin32 header).
REQUEST_OVERHEAD, PER_REPORT = 512, 5


def least_dummies(given: int | None, floor: int) -> int:
    """The fewest dummies this shuffler adds to a batch of ``floor`` people's reports, whatever a
    spec asks: ``--dummies`` when its operator gave it, else the project's default share of the
    floor (:func:`protocols.shuffling.default_dummies`, as many as the floor), so that an aggregator
    asking for none still gets a batch whose people hide among dummies when it floods it."""
    return default_dummies(floor) if given is None else given


def people_per_batch(limits: dict, length: int, dummies: int) -> int:
    """The most people's reports one batch request may carry beside ``dummies`` dummies, each
    ``length`` sealed bytes, within the aggregator's published ``limits``."""
    by_bytes = (limits["max_body_bytes"] - REQUEST_OVERHEAD) // (length + PER_REPORT)
    return min(limits["max_batch"], by_bytes) - dummies


class Views:
    """The pinned views of one shuffler: its ``store``, the views kept in memory once read, and the
    aggregator's ``session``."""

    def __init__(self, store, settings):
        self.store, self.settings = store, settings
        self.session: aiohttp.ClientSession | None = None
        self.known: dict[str, ShuffledView] = {}
        self.unknown: OrderedDict[str, float] = OrderedDict()
        self.limits: dict | None = None
        self._pinning: dict[str, asyncio.Future] = {}

    async def get(self, collection_id: str) -> ShuffledView:
        """The collection's view, pinned now if it has none; raises :class:`Problem`."""
        view = self.known.get(collection_id)
        if view is not None:
            return view
        try:
            view = await self.store.view(collection_id)
        except StoreUnavailable as exc:
            raise Problem(503, f"{exc}; retry later", 1.0) from None
        if view is None:
            if self.unknown.get(collection_id, 0.0) > time.monotonic():
                raise Problem(404, f"the aggregator has no shuffled collection {collection_id!r}", reason="unknown")
            pending = self._pinning.get(collection_id)
            if pending is None:  # one fetch per id however many ask at once
                pending = self._pinning[collection_id] = asyncio.ensure_future(self._pin(collection_id))
                pending.add_done_callback(lambda _: self._pinning.pop(collection_id, None))
            view = await asyncio.shield(pending)
        self.known[collection_id] = view
        return view

    def _unknown(self, collection_id: str) -> None:
        self.unknown[collection_id] = time.monotonic() + UNKNOWN_FOR
        self.unknown.move_to_end(collection_id)
        while len(self.unknown) > UNKNOWN_KEPT:
            self.unknown.popitem(last=False)

    async def _get_json(self, url: str) -> tuple[int, object]:
        try:
            async with self.session.get(url, headers={"Accept": "application/json"}, allow_redirects=False) as answer:
                return answer.status, (await answer.json(content_type=None) if answer.status == 200 else None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Problem(503, f"the aggregator cannot be reached: {failure_reason(exc)}; retry later") from None

    async def aggregator_limits(self) -> dict:
        """What one request to the aggregator may carry (``GET {aggregator}/limits``), fetched
        again at every call and kept for when it cannot be."""
        try:
            status, data = await self._get_json(f"{self.settings.aggregator}/limits")
        except Problem:
            status, data = 0, None
        if status == 200 and isinstance(data, dict) and all(
            isinstance(data.get(k), int) and data[k] > 0 for k in ("max_body_bytes", "max_batch")
        ):
            self.limits = {"max_body_bytes": data["max_body_bytes"], "max_batch": data["max_batch"]}
        if self.limits is None:
            raise Problem(503, "the aggregator publishes no request limits (GET /limits); retry later")
        return self.limits

    async def _pin(self, collection_id: str) -> ShuffledView:
        status, data = await self._get_json(f"{self.settings.aggregator}/collections/{collection_id}")
        if status == 404:
            self._unknown(collection_id)
            raise Problem(404, f"the aggregator has no collection {collection_id!r}", reason="unknown")
        if status != 200:
            raise Problem(503, f"the aggregator answered {status} for collection {collection_id!r}; retry later")
        try:
            spec = CollectionSpec.from_dict(data["spec"])
            uid, published, answered = data["uid"], data["fingerprint"], data["id"]
            if spec.shuffle is None or spec.shuffle.key is None or published != spec.fingerprint or answered != collection_id:
                raise ValueError
            floor = max(spec.shuffle.min_batch, self.settings.min_batch)
            dummies = max(spec.shuffle.dummies, least_dummies(self.settings.dummies, floor))
            view = ShuffledView(collection_id, uid, spec, floor, dummies)
        except (ParticipantError, KeyError, TypeError, ValueError):
            self._unknown(collection_id)
            raise Problem(
                409, f"the aggregator publishes no shuffled collection {collection_id!r} with a sealing key", reason="not_shuffled"
            ) from None
        if spec.shuffle.issuer_key is not None:
            try:
                tokens.issuing_key(spec.shuffle.issuer_key)
            except ParticipantError as exc:
                raise Problem(409, f"collection {collection_id!r}: {exc}", reason="unusable") from None
        room = people_per_batch(await self.aggregator_limits(), sealed_length(spec), view.dummies)
        if room < view.min_batch:
            raise Problem(
                409,
                f"a batch of {view.min_batch} reports and {view.dummies} dummies of {sealed_length(spec)} bytes does not fit "
                "in one request to the aggregator: its operator must raise --max-body or --max-batch (or lower the floor "
                "or the dummies)", reason="too_large",
            )
        try:
            return await self.store.pin(view)
        except StoreUnavailable as exc:
            raise Problem(503, f"{exc}; retry later", 1.0) from None
