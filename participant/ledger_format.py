"""The ledger file's shape: how an entry is keyed, and the checks that refuse any file a device did
not write (the rules of ``participant-js/src/ledger.ts`` too). :mod:`participant.ledger` reads and
writes the file; this module only says what a well-formed one holds.

The file is JSON in which no object repeats a key (JSON parsers keep one of the two, Python's and
JavaScript's the last: a repeated key is how a file would say two things at once, and it is refused).

Version 6 (written) is version 5 with ``reported``: the collections this device reported to whose
entries left the ledger, so that no collection is reported to twice once its entry has gone. It
maps a day (as ``spent`` writes one) to the markers (:func:`marker`, 32 hex digits each,
concatenated) of the entries drawn that day that left: one for the entry's origin and collection
id, one for its origin and published uid, as the ledger looks a collection up. A day's markers
leave once the day lies wholly before the last year (``participant.limits.YEAR_DAYS``), so within
any year a collection receives at most one report from a device; past it the yearly cap still
bounds the spend. See :func:`reported_problem`. Version 5 (read, moved to 6 by the next change:
its markers absent) is version 4 with the spend the device no longer keeps entry by entry:
``spent`` maps a day (the days since the epoch, UTC, in decimal) to the exact sum of the ε of the
entries drawn that day that left the ledger while the budget could still count them, written
:func:`spend_text` (numerator/denominator, in lowest terms: every float ε is a binary fraction,
so the denominator is a power of two and the text reads exactly in any language). Version 4 (read,
moved to 5 by the next change): each entry's ``report`` and ``sealed`` name a file in the directory beside
the ledger (``<ledger>.reports``) holding the bytes zlib-compressed, or are empty once the device
needs the bytes no more. The name commits to the entry as well as to the bytes: it is
:func:`report_name`, the SHA-256 (hex) of the field, the entry's key, question and group (canonical
JSON) followed by the SHA-256 of the bytes, so that a report named by one entry, or a report
named under another field, is a report altered. Version 3 (read, its reports named anew and the
ledger moved to 4 by the next change) named the files by the SHA-256 of the bytes alone. Version 2
(read, moved to 4 by the next change) held the bytes themselves, base64. The first format (read
and converted) stated no version: see :func:`first_format_place`."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import time
from fractions import Fraction

from .origin import normalise_origin

VERSION = 6
READABLE = (2, 3, 4, 5, 6)  # and the first format, which states no version


class RepeatedKey(ValueError):
    """A JSON object of the ledger file holds one key twice."""


def unique_keys(pairs: list) -> dict:
    """``json.loads``'s ``object_pairs_hook``: the object, unless it repeats a key (RepeatedKey)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        raise RepeatedKey("an object repeats a key")
    return data


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
    """A SHA-256 (lowercase hex), or empty: versions 3 and 4's ``report`` and ``sealed``, the names of their files."""
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


# Versions 3 and 4 hold names (digests) where version 2 held base64.
_REQUIRED_3 = {**_REQUIRED, "report": _digest}
_OPTIONAL_3 = {**_OPTIONAL, "sealed": _digest}


# How far past the device's clock an entry's times may lie (seconds): a device writes only times
# its clock showed, so a later one means the clock went back (by more than a day: no time zone or
# daylight-saving mistake is that large) or another program wrote the file. Either way the ledger
# is refused: a future entry would count toward the budget, and be remembered, for longer than
# the device decided.
CLOCK_SKEW = 86_400.0
# The largest input group an entry may name: an integer either language holds exactly.
LARGEST_GROUP = 2**53 - 1


def _clock(now: float | None) -> float:
    """The latest time (seconds since the epoch) an entry may record, the device's clock being ``now``."""
    return min(LATEST_TIME, (time.time() if now is None else now) + CLOCK_SKEW)


def _fields_problem(key: str, entry, version: int) -> str | None:
    """Step 1 of :func:`entry_problem`: which field is missing, unknown or of another type, if any."""
    required, optional = (_REQUIRED_3, _OPTIONAL_3) if version >= 3 else (_REQUIRED, _OPTIONAL)
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
    return None


def latest_moment(data: dict) -> float:
    """The latest moment (seconds since the epoch) a checked ledger ``data`` records: its entries'
    times, and the start of the last day of its spend and markers (a day is refused, as
    :func:`spent_problem` refuses one, when its start lies past the clock's skew). What :func:`clock_problem` holds
    against the clock when the ledger's bytes were checked before, at another reading of the clock."""
    latest = max((max(e["reserved_at"], e.get("sent_at", 0.0)) for e in data["entries"].values()), default=0.0)
    days = [int(day) for field in ("spent", "reported") for day in data.get(field, {})]
    return max(latest, float(max(days, default=-1) * SECONDS_PER_DAY))


def clock_problem(latest: float, now: float | None = None) -> str | None:
    """What is wrong with a ledger recording ``latest`` (:func:`latest_moment`) when the device's
    clock shows ``now`` (None: ``time.time()``): a time past the clock by more than a day (the clock
    was set back since, or the file came from a device whose clock ran ahead), or None."""
    if latest > _clock(now):
        return "it records a time past this device's clock (set back since it was written?)"
    return None


def _kind_problem(key: str, e: dict, version: int, latest: float) -> str | None:
    """Step 2 of :func:`entry_problem`: which combination of fields no writer makes, if any
    (the same rules, in the same order, as ``participant-js/src/ledger.ts``'s ``kindProblem``).

    The writers (``Ledger._add``, ``mark_sent``, ``reseal``, ``_expire``, ``_drop_acknowledged``
    and ``_from_v1``; ``record``, ``markSent``, ``reseal`` and ``expire`` in JavaScript) make
    these entries and no others:

    - of unknown spend (``epsilon`` null): a first-format entry as converted, which states no
      question, group, memo or shuffler, and records ``sent_at`` only if sent;
    - of known spend: ``memo_of`` always; ``sent_at`` exactly when ``sent``; ``question`` and
      ``group`` together or neither (an earlier format's entry, which may hold ``record`` in
      version 2 alone); a fresh draw (``memo_of`` null) spends ε > 0, a memoised copy (``memo_of``
      the key of an entry at the same origin, not its own) spends 0 and answers a question;
    - shuffled (``sealed``): drawn afresh with no question, never memoised; its report and sealed
      copy kept together until both are emptied once acknowledged;
    - unacknowledged: its report kept (it is re-sent, the very same bytes);
    - times the device's clock showed: at most ``latest``."""
    if e["reserved_at"] > latest or e.get("sent_at", 0) > latest:
        return f"entry {key!r} records a time past this device's clock"
    if e["epsilon"] is None:
        if any(name in e for name in ("question", "group", "memo_of", "record", "sealed")):
            return f"entry {key!r} holds an invalid 'epsilon'"  # only a first-format entry has an unknown spend
        if "sent_at" in e and not e["sent"]:
            return f"entry {key!r} holds 'sent_at' without 'sent' or 'sent' without 'sent_at'"
    else:
        if "memo_of" not in e:
            return f"entry {key!r} lacks 'memo_of'"
        if ("sent_at" in e) != e["sent"]:
            return f"entry {key!r} holds 'sent_at' without 'sent' or 'sent' without 'sent_at'"
    if ("question" in e) != ("group" in e):
        return f"entry {key!r} holds 'question' without 'group' or 'group' without 'question'"
    if "record" in e and (version != 2 or "question" in e):
        return f"entry {key!r} holds an invalid or unknown 'record'"
    if "sealed" in e and (e.get("question") != "" or e.get("memo_of") is not None):
        return f"entry {key!r} is shuffled but holds a question or a memo"
    memo = e.get("memo_of")
    if e["epsilon"] is not None and (memo is None) != (e["epsilon"] > 0):
        return f"entry {key!r} spends epsilon={e['epsilon']!r}: a draw spends more than 0, a memo 0"
    if memo is not None and (memo == key or not memo.startswith(e["origin"] + " ") or e.get("question", "x") == ""):
        return f"entry {key!r} copies a memo of another question or origin"
    if not e["sent"] and (e["report"] == "" or e.get("sealed", "x") == ""):
        return f"entry {key!r} is not sent but holds no report"
    if "sealed" in e and (e["report"] == "") != (e["sealed"] == ""):
        return f"entry {key!r} holds 'report' without 'sealed' or 'sealed' without 'report'"
    return None


def entry_problem(key: str, entry, version: int = VERSION, now: float | None = None) -> str | None:
    """What is wrong with the ledger entry ``entry`` under ``key`` in a ledger of ``version``, read
    when the device's clock shows ``now`` (seconds since the epoch; None: ``time.time()``), or None
    when it has a shape a device writes (the rules of ``participant-js/src/ledger.ts``'s
    ``entryProblem`` too): 1. its fields and their types; 2. their combination
    (:func:`_kind_problem`); 3. its key, origin and group."""
    problem = _fields_problem(key, entry, version) or _kind_problem(key, entry, version, _clock(now))
    if problem is not None:
        return problem
    if key != entry_key(entry["origin"], entry["collection"]):
        return f"entry {key!r} is not keyed by its origin and collection"
    if not _normal_origin(entry["origin"]):
        return f"entry {key!r} names an origin no device spells so"
    if entry.get("group") is not None and entry["group"] > LARGEST_GROUP:
        return f"entry {key!r} holds an invalid 'group'"
    return None


@functools.lru_cache(maxsize=256)
def _normal_origin(origin: str) -> bool:
    """Whether ``origin`` is an origin as :func:`normalise_origin` spells it (a ledger holds few)."""
    try:
        return normalise_origin(origin) == origin
    except ValueError:
        return False


def _answers_alike(source: dict, copy: dict) -> bool:
    """Whether the memo could have copied ``source``'s answer into ``copy``: as ``Ledger._answers``
    matches an entry to a question, by its question and group (an entry stating no question: by
    its spec's fingerprint), never a shuffled one."""
    if "sealed" in source or source.get("group") != copy.get("group"):
        return False
    if source.get("question"):
        return source["question"] == copy.get("question")
    return source["fingerprint"] == copy["fingerprint"]


def entries_problem(entries: dict) -> str | None:
    """What is wrong across the (each well-formed) ``entries`` of a ledger, or None (the rules of
    ``participant-js/src/ledger.ts``'s ``entriesProblem`` too): no two at one origin hold the same
    published uid (a uid reached again gets its entry back, never a second), and a memoised copy
    whose source is still in the ledger (it may have left since: expiry) copies a direct answer
    to the same question."""
    seen = set()
    for key, e in entries.items():
        place = (e["origin"], e["uid"])
        if place in seen:
            return f"entry {key!r} holds a uid another entry at its origin holds"
        seen.add(place)
        source = entries.get(e.get("memo_of"))
        if source is not None and not _answers_alike(source, e):
            return f"entry {key!r} copies a memo of another question or origin"
    return None


SECONDS_PER_DAY = 86_400
_DAY = re.compile(r"0|[1-9][0-9]{0,5}")
# A day's spend: numerator/denominator, each at most 700 digits (a sum of thousands of floats up
# to 2^1024 over denominators down to 2^-1074 needs under 650).
_SPEND = re.compile(r"([1-9][0-9]{0,699})/([1-9][0-9]{0,699})")


def spend_text(value: Fraction) -> str:
    """``value`` (a positive binary fraction) as a day's spend is written: ``"numerator/denominator"``."""
    return f"{value.numerator}/{value.denominator}"


def spend_value(text: str) -> Fraction:
    """The exact ε a day's spend ``text`` (checked by :func:`spent_problem`) holds."""
    numerator, denominator = text.split("/")
    return Fraction(int(numerator), int(denominator))


def _spend(text) -> bool:
    """Exactly what :func:`spend_text` writes: a positive fraction in lowest terms over a power of two."""
    match = _SPEND.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return False
    numerator, denominator = int(match[1]), int(match[2])
    return denominator & (denominator - 1) == 0 and math.gcd(numerator, denominator) == 1


def spent_problem(spent, now: float | None = None) -> str | None:
    """What is wrong with a version 5 ledger's ``spent`` (day -> spend), read when the device's
    clock shows ``now`` (None: ``time.time()``), or None when a device wrote it: no day after the
    clock's (the spend of an entry that left, drawn on a day the clock showed)."""
    if not isinstance(spent, dict):
        return "its spend by day is not a mapping"
    last = int(_clock(now)) // SECONDS_PER_DAY
    for day, text in spent.items():
        if _DAY.fullmatch(day) is None or int(day) > last:
            return f"its spend names a day that is none: {day[:20]!r}"
        if not _spend(text):
            return f"its spend of day {day} is not a sum a device writes"
    return None


MARKER_HEX = 32  # 16 bytes of SHA-256
_HEX = re.compile(r"[0-9a-f]+")


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate as U+FFFD (as JavaScript's TextEncoder writes it)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


def marker(kind: str, origin: str, name: str) -> str:
    """The marker (32 lowercase hex digits: the first 16 bytes of a SHA-256) that this device
    reported at ``origin`` to the collection of id ``name`` (``kind`` ``"collection"``) or of
    published uid ``name`` (``kind`` ``"uid"``): of ``kind``, a newline, ``origin`` (a normalised
    origin holds no newline), a newline and ``name``, as UTF-8 (``participant-js``'s ``marker`` too)."""
    return hashlib.sha256(_utf8(f"{kind}\n{origin}\n{name}")).hexdigest()[:MARKER_HEX]


def reported_problem(reported, now: float | None = None) -> str | None:
    """What is wrong with a version 6 ledger's ``reported`` (day -> concatenated markers), read
    when the device's clock shows ``now`` (None: ``time.time()``), or None when a device wrote it:
    days as ``spent`` writes them (none after the clock's), each holding one marker or more, and no
    marker twice in the whole mapping (a device adds a marker only when it holds none equal)."""
    if not isinstance(reported, dict):
        return "its markers by day are not a mapping"
    last = int(_clock(now)) // SECONDS_PER_DAY
    for day, text in reported.items():
        if _DAY.fullmatch(day) is None or int(day) > last:
            return f"its markers name a day that is none: {day[:20]!r}"
        if not isinstance(text, str) or len(text) % MARKER_HEX or _HEX.fullmatch(text) is None:
            return f"its markers of day {day} are not markers a device writes"
    joined = "".join(reported.values())  # a year of markers: one pass over them all
    if len({joined[i : i + MARKER_HEX] for i in range(0, len(joined), MARKER_HEX)}) * MARKER_HEX != len(joined):
        return "its markers repeat a marker"
    return None


def ledger_problem(data, now: float | None = None) -> str | None:
    """What is wrong with a parsed ledger file, read when the device's clock shows ``now``
    (seconds since the epoch; None: ``time.time()``), or None when it is a ledger a device writes:
    its keys, each entry (:func:`entry_problem`), the entries together (:func:`entries_problem`)
    and its spend by day (:func:`spent_problem`); the same steps as ``participant-js``'s ``ledgerProblem``."""
    if not isinstance(data, dict):
        return "not a mapping"
    if not _finite(data.get("version")) or data["version"] not in READABLE:
        return f"not version {' or '.join(map(str, READABLE))}"
    if data["version"] >= 6:
        if set(data) != {"version", "entries", "spent", "reported"} or not isinstance(data["entries"], dict):
            return "not a mapping of version, entries, spend and markers"
    elif data["version"] == 5:
        if set(data) != {"version", "entries", "spent"} or not isinstance(data["entries"], dict):
            return "not a mapping of version, entries and spend"
    elif not set(data) <= {"version", "entries", "salt"} or not isinstance(data.get("entries"), dict):
        return "not a mapping of version and entries"
    version, now = data["version"], time.time() if now is None else now
    entries = data["entries"]
    problem = next((p for key, e in entries.items() if (p := entry_problem(key, e, version, now)) is not None), None)
    problem = problem or entries_problem(entries)
    if problem is not None or version < 5:
        return problem
    return spent_problem(data["spent"], now) or (reported_problem(data["reported"], now) if version >= 6 else None)


def report_name(field: str, key: str, entry: dict, digest: bytes) -> str:
    """The name, in a ledger of version 4, of the file holding the bytes (of SHA-256 ``digest``)
    of ``field`` (``report`` or ``sealed``) of ``entry``, kept under ``key``: the SHA-256 (hex)
    of ``[field, key, question, group]`` as canonical JSON (ASCII, no spaces, the group a float:
    ``participant-js``'s ``canonicalJson`` writes the same bytes), then ``digest``. A file named by
    another entry, another field, or an entry whose question or group was changed is refused as
    altered when it is read. (The digest of the bytes, not the bytes: a version 3 file, named by
    that digest, is named anew without being read.)"""
    group = entry.get("group")
    binding = [field, key, entry.get("question", ""), None if group is None else float(group) + 0.0]  # + 0.0: -0 is 0
    return hashlib.sha256(json.dumps(binding, separators=(",", ":")).encode() + digest).hexdigest()


# The first format (the device before version 2, which stated no version): a mapping of the
# published uid (at least 16 characters) to an entry holding exactly the report (base64 of a
# packed report: never empty), whether it was acknowledged, when it was drawn (and acknowledged),
# the collection's URL (``<service>/collections/<id>``) and its spec's fingerprint (SHA-256, hex).
_FIRST_REQUIRED = {
    "report": lambda v: _base64(v) and v != "",
    "sent": lambda v: isinstance(v, bool),
    "reserved_at": _time,
    "collection": lambda v: isinstance(v, str),
    "fingerprint": lambda v: isinstance(v, str) and _DIGEST.fullmatch(v) is not None,
}
_FIRST_OPTIONAL = {"sent_at": _time}


def first_format_place(uid, entry) -> tuple[str, str] | None:
    """The origin (normalised) and collection id of ``entry``, kept under ``uid`` in a ledger of
    the first format, from the URL it recorded; None unless it is exactly an entry that format's
    device wrote (the rules of ``participant-js/src/ledger.ts`` too). A ledger is read as one of
    the first format only when it states no version and every entry has a place, no two the same:
    anything less is not a ledger a device wrote, and is refused."""
    if not isinstance(uid, str) or len(uid) < 16 or not isinstance(entry, dict):
        return None
    if not all(name in entry and ok(entry[name]) for name, ok in _FIRST_REQUIRED.items()):
        return None
    if not all(name in _FIRST_REQUIRED or (name in _FIRST_OPTIONAL and _FIRST_OPTIONAL[name](value))
               for name, value in entry.items()):  # fmt: skip
        return None
    service, separator, collection = entry["collection"].rpartition("/collections/")
    if not separator or not collection:
        return None
    try:
        return normalise_origin(service), collection
    except ValueError:
        return None
