"""A request the shuffler refuses: the status and the message its client is told."""

from __future__ import annotations


class Problem(Exception):
    """A request the shuffler refuses: ``status``, the message a client is told and, for 429 and
    503, ``retry_after`` seconds; ``reason``, a word a program reads, where one is defined (why a
    collection has no view: ``unknown``, ``not_shuffled``, ``too_large``, ``unusable``); for a
    limit, ``option``, the ``serve`` option that lifts it (``--per-address``), which the message
    names too."""

    def __init__(
        self, status: int, message: str, retry_after: float | None = None, reason: str | None = None,
        option: str | None = None,
    ):  # fmt: skip
        if option is not None:
            message = f"{message}; its operator can raise python -m shuffler serve {option}"
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.reason = reason
        self.option = option
