"""A request the shuffler refuses: the status and the message its client is told."""

from __future__ import annotations


class Problem(Exception):
    """A request the shuffler refuses: ``status``, the message a client is told and, for 429 and
    503, ``retry_after`` seconds; ``reason``, a word a program reads, where one is defined (why a
    collection has no view: ``unknown``, ``not_shuffled``, ``too_large``, ``unusable``)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.reason = reason
