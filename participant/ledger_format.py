"""The ledger file's shape: how an entry is keyed, and the checks that refuse any file a device did
not write (the rules of ``participant-js/src/ledger.ts`` too). :mod:`participant.ledger` reads and
writes the file; this module only says what a well-formed one holds.

Version 3 (written): each entry's ``report`` and ``sealed`` hold the SHA-256 (hex) of the bytes,
kept zlib-compressed in a file of that name in the directory beside the ledger (``<ledger>.reports``), or are
empty once the device needs the bytes no more. Version 2 (read, moved to 3 by the next change)
held the bytes themselves, base64."""

from __future__ import annotations

import math
import re

VERSION = 3
READABLE = (2, 3)  # and the first format, which states no version


def entry_key(origin: str, collection: str) -> str:
    return f"{origin} {collection}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> bool:
    """A finite JSON number (bools are not numbers)."""
    if not _is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


# The latest time (seconds since the epoch, in the year 2242) an entry may record: no device's
# clock shows a later one, and an entry drawn "later" would count toward the budget, and be
# remembered, for ever.
LATEST_TIME = 2.0**33


def _time(value) -> bool:
    return _finite(value) and 0 <= value <= LATEST_TIME


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _base64(value) -> bool:
    """Standard base64 whose padding completes its last quantum (no more: JavaScript's reading)."""
    return isinstance(value, str) and len(value) % 4 == 0 and _BASE64.fullmatch(value) is not None


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _digest(value) -> bool:
    """The SHA-256 of a report's bytes (lowercase hex), or empty: version 3's ``report`` and ``sealed``."""
    return isinstance(value, str) and (value == "" or _DIGEST.fullmatch(value) is not None)


# The fields of an entry as a device writes them, and what each must hold. ``question``,
# ``group``, ``memo_of`` and ``sent_at`` are absent from entries of earlier formats, and
# ``epsilon`` is None for a first-format entry alone (its spend unknown: counted at the cap); ``record``
# is an earlier format's field, dropped at the next write. Any other field or type is not a
# ledger this library wrote, and the device refuses it rather than guess. ``sealed`` holds the
# sealed body of a report to a shuffled collection (base64), sent instead of ``report``.
_REQUIRED = {
    "origin": lambda v: isinstance(v, str),
    "collection": lambda v: isinstance(v, str),
    "uid": lambda v: isinstance(v, str),
    "fingerprint": lambda v: isinstance(v, str),
    "epsilon": lambda v: v is None or (_finite(v) and v >= 0),
    "report": _base64,
    "sent": lambda v: isinstance(v, bool),
    "reserved_at": _time,
}
_OPTIONAL = {
    "question": lambda v: isinstance(v, str),
    "group": lambda v: v is None or (_finite(v) and v >= 0 and float(v).is_integer()),
    "memo_of": lambda v: v is None or isinstance(v, str),
    "sent_at": _time,
    "record": lambda v: isinstance(v, str),
    "sealed": _base64,
}


# Version 3 holds digests where version 2 held base64.
_REQUIRED_3 = {**_REQUIRED, "report": _digest}
_OPTIONAL_3 = {**_OPTIONAL, "sealed": _digest}


def entry_problem(key: str, entry, version: int = VERSION) -> str | None:
    """What is wrong with the ledger entry ``entry`` under ``key`` in a ledger of ``version``, or
    None when it has the shape a device writes (the rules of ``participant-js/src/ledger.ts`` too)."""
    required, optional = (_REQUIRED_3, _OPTIONAL_3) if version == 3 else (_REQUIRED, _OPTIONAL)
    if not isinstance(entry, dict):
        return f"entry {key!r} is not a mapping"
    for name, ok in required.items():
        if name not in entry:
            return f"entry {key!r} lacks {name!r}"
        if not ok(entry[name]):
            return f"entry {key!r} holds an invalid {name!r}"
    for name, value in entry.items():
        if name not in required and (name not in optional or not optional[name](value)):
            return f"entry {key!r} holds an invalid or unknown {name!r}"
    if entry["epsilon"] is None and ("question" in entry or "memo_of" in entry):
        # Only an entry of the first format, which states no question, has an unknown spend.
        return f"entry {key!r} holds an invalid 'epsilon'"
    if key != entry_key(entry["origin"], entry["collection"]):
        return f"entry {key!r} is not keyed by its origin and collection"
    return None


def ledger_problem(data) -> str | None:
    """What is wrong with a parsed ledger file, or None when it is a ledger a device writes."""
    if not isinstance(data, dict):
        return "not a mapping"
    if not _finite(data.get("version")) or data["version"] not in READABLE:
        return f"not version {' or '.join(map(str, READABLE))}"
    if not set(data) <= {"version", "entries", "salt"} or not isinstance(data.get("entries"), dict):
        return "not a mapping of version and entries"
    version = data["version"]
    return next((p for key, e in data["entries"].items() if (p := entry_problem(key, e, version)) is not None), None)


def _valid_v1(entry) -> bool:
    """An entry of the first format (keyed by the published uid)."""
    return isinstance(entry, dict) and isinstance(entry.get("sent"), bool) and _base64(entry.get("report"))
