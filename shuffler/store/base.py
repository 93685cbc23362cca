"""The shuffler's store interface, and why nothing acknowledged is lost, counted twice, released in
a smaller batch, or kept once forwarded, and why its files say nothing of whose a report was.

- **A report is stored before it is acknowledged.** :meth:`Store.add` commits the sealed bytes,
  keyed by (collection, SHA-256 of the bytes), before the device hears ``accepted``. A device
  re-sending the very same bytes (its retry after a lost answer), even after its batch left, finds
  the digest and hears ``duplicate``: one person's report is one row, so it never makes a batch
  look larger than its people.
- **Batches are drawn in one transaction.** :meth:`Store.release` takes the reports waiting for a
  collection, only when there are at least its floor, splits them uniformly at random into
  batches of at least the floor each (:func:`split`), adds to each the dummies drawn for it, puts
  every batch in a uniformly random order (the operating system's CSPRNG), writes the batches and
  deletes their reports from those waiting, all in one commit: after a crash a batch is whole or
  was never drawn, and a report is either waiting or in exactly one batch.
- **What was released is remembered alike, whoever wrote it.** The same commit writes the digest
  of every report of every batch drawn, the people's and the dummies', to the released set, in the
  batch's drawn order, with the day of the release (public: batches leave on a schedule). A
  re-post of any forwarded report, a person's retry or the aggregator replaying what it received,
  finds its digest there and hears ``duplicate``, a dummy's exactly as a person's: the answer
  cannot tell them apart, and neither can the set's contents or its placement in the files, which
  follow the drawn order, never arrival. The set is dropped when its collection closes
  (:meth:`Store.forget`: a closed collection refuses every report first) and, for a collection
  that stays open, a release's digests after the shuffler's horizon (:meth:`Store.expire`).
- **A batch is deleted only once the aggregator acknowledged it.** Until then it is forwarded
  again, the same reports in the same order under the same id: the aggregator counts each report
  id once, so a batch forwarded twice (its answer lost, its shuffler killed after the aggregator
  counted it, or two instances forwarding it) counts once.
- **The floor is the shuffler's to keep.** A collection's view (:mod:`shuffler.views`) is pinned
  once, the first pin winning when several instances pin at once, and every release applies the
  larger of its floor and the shuffler's own.
- **One instance releases and forwards a collection at a time** (:meth:`Store.holding`): others
  skip it for that round. Correctness does not rest on it (the two points above hold whatever
  runs at once); it keeps instances from drawing thin batches side by side and from sending one
  batch twice.

What a store keeps: of a waiting report its collection, digest and sealed bytes; of every report
released its digest and the day of its release; of a drawn batch its reports in their drawn order
until acknowledged. No address, header or arrival time. Two implementations:
:class:`~shuffler.store.sqlite.SQLiteStore`, one process and one file, which also keeps nothing of
a released report in arrival order, nor of a forwarded report's bytes, on disk; and
:class:`~shuffler.store.postgres.PostgresStore`, for several instances on one database, whose
files do not promise that (see there).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from participant.view import ShuffledView


@dataclass(frozen=True)
class Batch:
    """A drawn batch waiting for the aggregator's acknowledgement: its local ``id``, the ``name``
    the aggregator knows it by (random), its ``collection``, how many of its reports are
    ``people``'s and how many ``dummies`` (``padding`` of them in a closing batch), and its
    sealed reports in their drawn order."""

    id: int
    name: str
    collection: str
    people: int
    dummies: int
    sealed: list[bytes]
    padding: int = 0  # of the dummies, those that stand in for people a closing batch lacked


def split(rows: list, floor: int, cap: int, batches: int) -> list[list]:
    """``rows`` (already in a uniformly random order) cut into at most ``batches`` consecutive
    batches of near-equal size, each of at least ``floor`` and at most ``cap`` rows; the rows that
    do not fit stay out. Empty when fewer than ``floor`` rows or ``cap < floor``."""
    waiting = len(rows)
    if waiting < floor or cap < floor:
        return []
    count = max(1, min(batches, math.ceil(waiting / cap), waiting // floor))
    taken = min(waiting, count * cap)
    edges = [round(b * taken / count) for b in range(count + 1)]
    return [rows[edges[b] : edges[b + 1]] for b in range(count)]


def today() -> int:
    """Days since 1970-01-01 (UTC): the day a release is remembered by."""
    return int(time.time() // 86_400)


class StoreUnavailable(Exception):
    """The store cannot serve the request now (its database is away or refusing)."""


class Store(ABC):
    """The shuffler's persistence; every method is a coroutine (see the module's text)."""

    #: what the store is, for messages (a path, or a URL without its password)
    location: str

    @abstractmethod
    async def shut(self) -> None:
        """Let go of the database (the service is stopping)."""

    # views

    @abstractmethod
    async def view(self, collection_id: str) -> ShuffledView | None:
        """The view pinned for the collection, or None."""

    @abstractmethod
    async def pin(self, view: ShuffledView) -> ShuffledView:
        """Pin ``view`` for its collection unless one is pinned already; the pinned view."""

    @abstractmethod
    async def views(self) -> list[ShuffledView]:
        """Every pinned view, in id order."""

    @abstractmethod
    async def forwarded_count(self, collection_id: str) -> int:
        """People's reports of the collection forwarded and acknowledged so far."""

    # reports

    @abstractmethod
    async def add(self, items: list[tuple[str, bytes]]) -> list[bool | None]:
        """Store every ``(collection, sealed)`` in one commit; for each, whether it is new (False:
        these very bytes wait already, were released (a person's or a dummy), or came earlier in
        ``items``; None: its collection is closed, and it is not stored). Atomic with :meth:`close`:
        a report is either stored before the collection closes, and so released by its close, or
        refused; and with :meth:`release`: bytes released meanwhile are never stored again."""

    @abstractmethod
    async def waiting(self, collection_id: str) -> int:
        """Reports of the collection not yet in a batch."""

    @abstractmethod
    async def waiting_all(self) -> dict[str, int]:
        """Reports not yet in a batch, per collection with any."""

    # batches

    @abstractmethod
    async def release(
        self, collection_id: str, floor: int, cap: int, dummies: list[list[bytes]], padding: int = 0
    ) -> list[int]:
        """Draw batches of the collection's waiting reports, in one transaction: at most
        ``len(dummies)`` batches, each of at least ``floor`` and at most ``cap`` people's reports
        and the dummies ``dummies[b]`` (of which the first batch's last ``padding`` stand in for
        people), in a uniformly random order, every one of their digests added to the released set
        in that order with today's day; returns their ids (none when fewer than ``floor`` wait).
        Reports left out wait for the next release."""

    @abstractmethod
    async def close(self, collection_id: str) -> None:
        """The collection takes no more reports, at any instance: once this returns, every
        :meth:`add` that stored one of its reports has committed, and none will store another."""

    @abstractmethod
    async def closed(self, collection_id: str) -> bool:
        """Whether the collection was closed."""

    @abstractmethod
    async def forget(self, collection_id: str) -> None:
        """Drop the collection's released set (it is closed: every report to it is refused first)."""

    @abstractmethod
    async def expire(self, before_day: int) -> int:
        """Drop every released digest of a release before ``before_day`` (days since 1970-01-01,
        UTC); how many were dropped."""

    @abstractmethod
    async def writable(self) -> None:
        """Raise (the database's own error, or :class:`StoreUnavailable`) unless a write could
        start now: what ``/healthz`` asks, so that a store that takes reads but not writes (a
        foreign lock, a read-only database) is not called healthy."""

    @abstractmethod
    async def in_flight(self) -> list[tuple[int, str]]:
        """Every batch drawn and not yet acknowledged: ``(batch id, collection)``, oldest first."""

    @abstractmethod
    async def batch(self, batch: int) -> Batch | None:
        """A drawn batch, its sealed reports in their drawn order (None once acknowledged)."""

    @abstractmethod
    async def forwarded(self, batch: int) -> None:
        """The aggregator acknowledged ``batch``: it leaves the store (its digests stay released)."""

    async def operator_rows(self) -> list[dict]:
        """What the shuffler's operator may read of every pinned collection, and nobody else: its
        floor and dummies, the reports ``waiting`` (exact), the batches drawn and not yet
        acknowledged (``in_flight``), the people's reports ``forwarded``, whether ``closed``."""
        waiting = await self.waiting_all()
        in_flight: dict[str, int] = {}
        for _, collection_id in await self.in_flight():
            in_flight[collection_id] = in_flight.get(collection_id, 0) + 1
        return [
            {"id": view.collection, "min_batch": view.min_batch, "dummies": view.dummies,
             "waiting": waiting.get(view.collection, 0), "in_flight": in_flight.get(view.collection, 0),
             "forwarded": await self.forwarded_count(view.collection), "closed": await self.closed(view.collection)}
            for view in await self.views()
        ]  # fmt: skip

    #: Whether a scrub failed and none has finished since (the next round scrubs whatever it did).
    unscrubbed: bool = False

    async def scrub(self) -> None:
        """Leave on disk nothing of what was just deleted, where the store can (see the
        implementations); raises :class:`StoreUnavailable` when it could not."""

    def holding(self, collection_id: str) -> AbstractAsyncContextManager[bool]:
        """A context in which this instance alone releases and forwards the collection, if it
        gets it (the context's value says whether)."""
        return _Always()


class _Always:
    """:meth:`Store.holding` of a store one process owns: always held."""

    async def __aenter__(self) -> bool:
        return True

    async def __aexit__(self, *exc) -> None:
        return None
