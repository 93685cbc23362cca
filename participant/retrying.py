"""When a client asks a party again, and what it says when it stops asking.

A 5xx or 429 answer, or no answer, is tried again (the same bytes: a report is idempotent by its
id). Before each new attempt the client waits its own backoff or, when a 429 or 503 answer's
``Retry-After`` asks longer, that long and up to a fifth more (the jitter that keeps devices
refused together from returning together; never less than asked). Two bounds the app sets keep a
service from stalling a device: one wait asked beyond ``max_retry_after`` seconds ends the attempts
at once, and so does a wait that would carry them past ``retry_deadline`` seconds from the first.
The wait depends only on the answer, the attempt's number and the clock, never on the person's
record or the noise drawn: it tells the party nothing it did not say itself.

When the attempts end, :func:`refusal` says which party refused (the shuffler or the aggregator,
by the URL asked) and, for a rate limit, the ``serve`` option its operator raises to lift it.
"""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime

#: Seconds: the longest ``Retry-After`` a client honours by default; one asking longer ends the attempts.
DEFAULT_MAX_RETRY_AFTER = 60.0
#: Seconds: how long after its first attempt a request may still be tried again, by default.
DEFAULT_RETRY_DEADLINE = 300.0
#: The share of an asked wait a device may add to it, at random, so that devices do not return in lockstep.
JITTER = 0.2

# The options of the shuffler's ``serve`` that lift one of its 429s (what its 429's ``option`` may name).
SHUFFLER_OPTIONS = ("--per-address", "--per-collection", "--max-waiting")

_DELTA = re.compile(r"\s*\d+(\.\d+)?\s*")


def retry_after(value: str | None, now: float) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait: its delta-seconds, or its HTTP-date less
    ``now`` (seconds since the epoch; 0 for a date passed); None when it is absent or malformed."""
    if value is None:
        return None
    if _DELTA.fullmatch(value):
        return float(value)  # past any float, math.inf: over any cap, as JavaScript reads it
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a date without a zone is not one
        return None
    return max(0.0, when.timestamp() - now)


def wait_before(attempt: int, backoff: float, asked: float | None, draw: float) -> float:
    """Seconds to wait before attempt number ``attempt`` (from 1, the first retry): ``backoff``
    doubled each attempt, jittered by ``draw`` (uniform in [0, 1), never the person's data) between
    half and one and a half times, or the ``asked`` seconds plus up to :data:`JITTER` of them when
    that is longer."""
    own = backoff * 2 ** (attempt - 1) * (0.5 + draw)
    return own if asked is None else max(own, asked * (1 + JITTER * draw))


def party(url: str, shuffler: str | None, aggregator: str) -> tuple[str, bool]:
    """``("the shuffler at ORIGIN", True)`` when ``url`` is on the ``shuffler`` origin the app
    pins, else ``("the aggregator at ORIGIN", False)`` (``aggregator``, the origin it reports to)."""
    if shuffler is not None and url.startswith(shuffler + "/"):
        return f"the shuffler at {shuffler}", True
    return f"the aggregator at {aggregator}", False


def option(status: int | None, is_shuffler: bool, named: object = None) -> str | None:
    """The ``serve`` option (``"python -m shuffler serve --per-address"``) that lifts the limit a
    429 answer names: the one in its ``option`` field when that is one of the party's own, else the
    party's limit per address; None for any other answer."""
    if status != 429:
        return None
    if is_shuffler:
        return f"python -m shuffler serve {named if named in SHUFFLER_OPTIONS else '--per-address'}"
    return "python -m aggregator serve --rate-limit"


def last_answer(status: int, body: bytes, data: object) -> str:
    """How the last answer reads in an error: its status and its JSON ``error`` (printable, at most
    200 characters), or the first 200 bytes of any other body."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str):
        return f"{status} {''.join(c if c.isprintable() else '?' for c in error[:200])}"
    return f"{status} {body[:200]!r}"
