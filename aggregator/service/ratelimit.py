"""Reports per collection per minute from one source: a token bucket per (collection, address)."""

from __future__ import annotations

import math
import time


class RateLimiter:
    """``per_minute`` reports per (collection, source); a batch spends one token per report.

    Buckets start full, refill continuously, and idle full ones are forgotten when the table grows.
    """

    MAX_BUCKETS = 100_000

    def __init__(self, per_minute: int, clock=time.monotonic):
        if isinstance(per_minute, bool) or not isinstance(per_minute, int) or per_minute < 1:
            raise ValueError(f"a rate limit is a whole number of reports per minute >= 1, got {per_minute!r}")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.buckets: dict[tuple[str, str], tuple[float, float]] = {}

    def _tokens(self, key: tuple[str, str], now: float) -> float:
        tokens, last = self.buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - last) * self.rate)

    def exhausted(self, collection: str, source: str) -> bool:
        """True when not one token is left for (collection, source); spends nothing."""
        return self._tokens((collection, source), self.clock()) < 1

    def take(self, collection: str, source: str, count: int = 1) -> float:
        """Spend ``count`` tokens; returns 0 if allowed, else the seconds until they would be."""
        now = self.clock()
        tokens = self._tokens((collection, source), now)
        if count > tokens:
            self.buckets[(collection, source)] = (tokens, now)
            return math.inf if count > self.capacity else (count - tokens) / self.rate
        self.buckets[(collection, source)] = (tokens - count, now)
        if len(self.buckets) > self.MAX_BUCKETS:
            self._forget_full(now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        self.buckets = {
            key: (tokens, last)
            for key, (tokens, last) in self.buckets.items()
            if tokens + (now - last) * self.rate < self.capacity
        }
