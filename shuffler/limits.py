"""What one party may send the shuffler: reports per address, reports per collection, reports
waiting per collection, and the bytes of request bodies being read at once (connections are
capped below the handlers, :mod:`participant.serving`).

Without them anyone could fill a batch with reports of their own faster than people send theirs
(60,000 in a second from one address), or hold the shuffler's memory with large bodies. They bound
what flooding costs; they cannot stop an aggregator with many addresses, which is what the
shuffler's dummies are for (:mod:`participant.dummies`). Addresses are kept in memory only, for a
bucket's refill time, never with a report.

A limit is a resource everyone shares, so whoever drives one to its edge sees others use it: an
aggregator that fills a collection's waiting reports to the cap learns, from its next report's
429, that someone's report arrived meanwhile. That is when a report came, which a network
observer sees too; never which forwarded report it was (a batch's order is drawn, and every
released report answers alike). Only a report that could be stored is counted against the cap,
so a malformed one asks nothing of it.
"""

from __future__ import annotations

import math
import time

from .problems import Problem


class Buckets:
    """A token bucket per key: ``per_second`` tokens a second, at most ``burst`` saved; 0 is no limit."""

    MAX_KEYS = 100_000

    def __init__(self, per_second: float, burst: float, clock=time.monotonic):
        self.rate, self.capacity, self.clock = float(per_second), float(max(burst, 1)), clock
        self.buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, count: int = 1) -> float:
        """Spend ``count`` tokens of ``key``'s bucket; 0 when allowed, else the seconds to wait."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, last = self.buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - last) * self.rate)
        if count > tokens:
            self.buckets[key] = (tokens, now)
            return math.inf if count > self.capacity else (count - tokens) / self.rate
        self.buckets[key] = (tokens - count, now)
        if len(self.buckets) > self.MAX_KEYS:  # forget the full ones
            self.buckets = {k: (t, s) for k, (t, s) in self.buckets.items() if t + (now - s) * self.rate < self.capacity}
        return 0.0


class Limits:
    """The shuffler's limits (see the module's text), from its settings."""

    def __init__(self, settings):
        self.settings = settings
        self.addresses = Buckets(settings.per_address / 60.0, settings.per_address)
        self.collections = Buckets(settings.per_collection, settings.per_collection)
        self.reading = 0  # bytes of request bodies being read now

    def admit(self, address: str, collection_id: str, posted: int, storable: int, waiting: int) -> None:
        """Raise :class:`Problem` (429) unless ``posted`` more reports from ``address``, of which
        ``storable`` have the collection's length and digest, to a collection with ``waiting``
        reports waiting are within the limits; spends their tokens."""
        if storable and waiting + storable > self.settings.max_waiting:
            # The cap, not the count: an exact count would tell when one more report arrived.
            raise Problem(
                429, f"as many reports of {collection_id!r} as this shuffler keeps ({self.settings.max_waiting:,}) "
                "wait for a batch already; retry later", 5.0, option="--max-waiting",
            )  # fmt: skip
        wait = self.addresses.take(address, posted)
        if wait:
            message = f"too many reports from this address (at most {self.settings.per_address} a minute)"
            raise Problem(429, message, _seconds(wait), option="--per-address")
        wait = self.collections.take(collection_id, posted)
        if wait:
            message = f"too many reports to {collection_id!r} (at most {self.settings.per_collection:g} a second)"
            raise Problem(429, message, _seconds(wait), option="--per-collection")

    def reserve(self, size: int) -> None:
        """Count ``size`` bytes of a body just received; 503 when the bodies being read would pass
        :attr:`~Settings.max_reading`. Give them back with :meth:`release`."""
        if self.reading + size > self.settings.max_reading:
            raise Problem(503, "the shuffler is reading as much as it will at once; retry shortly", 1.0)
        self.reading += size

    def release(self, size: int) -> None:
        self.reading -= size


def _seconds(wait: float) -> float:
    return 60.0 if math.isinf(wait) else max(1.0, math.ceil(wait))
