"""A cryptographically secure random source: the participant's randomness.

Every draw reads the operating system's CSPRNG (``os.urandom``). A participant's report must not
be predictable from earlier reports or from a seed, which a numpy bit generator cannot promise.
It is an :class:`~protocols.exact.ExactRandomness`, so the mechanisms draw a device's report with
their exact samplers (integer thresholds, exact discrete Laplace); it also offers the slice of
numpy's ``Generator`` API (``random``, ``integers``) for anything else.
"""

from __future__ import annotations

import os
import secrets

import numpy as np

from protocols.exact import ExactRandomness

_DOUBLE_UNIT = 2.0**-53


class SecureGenerator(ExactRandomness):
    """Uniform draws from ``os.urandom``; a drop-in for ``numpy.random.Generator`` in ``protocols``."""

    @staticmethod
    def _words(count: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * count), dtype=np.uint64)

    def words(self, count: int) -> np.ndarray:
        return self._words(count)

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(n)

    def random(self, size=None):
        """Uniform floats in [0, 1) with 53 random bits each; a float when ``size`` is None."""
        count = 1 if size is None else int(np.prod(size))
        draws = (self._words(count) >> np.uint64(11)).astype(np.float64) * _DOUBLE_UNIT
        return float(draws[0]) if size is None else draws.reshape(size)

    def integers(self, low, high=None, size=None):
        """Uniform integers in [low, high) (or [0, low) when ``high`` is None), without modulo bias."""
        if high is None:
            low, high = 0, low
        span = int(high) - int(low)
        if span <= 0:
            raise ValueError("high must be greater than low")
        count = 1 if size is None else int(np.prod(size))
        if count == 1:  # one device draw (its input, an index): no array machinery
            value = int(low) + self.randbelow(span)
            return value if size is None else np.full(size, value, dtype=np.int64)
        # Reject words at or above the largest multiple of span below 2**64.
        limit = np.uint64((2**64 // span) * span - 1)
        out = np.empty(count, dtype=np.int64)
        filled = 0
        while filled < count:
            words = self._words(count - filled)
            words = words[words <= limit]
            out[filled : filled + words.size] = (words % np.uint64(span)).astype(np.int64) + int(low)
            filled += words.size
        return int(out[0]) if size is None else out.reshape(size)
