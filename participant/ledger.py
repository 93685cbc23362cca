"""The device's ledger: what it reported, where, and what that spent.

Everything here is decided on the device from what the app configured and the questions asked,
never from the person's data, and never from what a service claims about itself: what a service
publishes (its ``uid``, its spec) can only make the device refuse more, never spend more.

- **One report per collection.** An entry is keyed by the origin the app gave the client
  (normalised as a browser would: :mod:`participant.origin`) and the collection id the app asked
  for. A collection reported to is never reported to again; if the service now publishes another
  spec for it, the device refuses (:class:`CollectionChanged`). The one exception: a report never
  acknowledged is re-sent, the very same bytes, which reveal nothing new. An entry that leaves the
  ledger (below) leaves a marker (a hash of its origin and id, and one of its origin and published
  uid) for a year, and a collection found there is refused as one still in the ledger
  (:class:`AlreadyReported`): within any year a collection receives at most one report from a
  device; past it, the yearly cap still bounds what a second would spend.
- **One answer per question at an origin (the memo).** A question is what decides a report's
  distribution given a record: the spec without the fields the device never uses (θ, SHE or THE),
  and the input group the operator assigned. Every collection at one origin that asks a question
  this device answered there before, under any id, gets that same randomised answer again under a
  fresh report id, and costs nothing, *whatever the person's record now is*. So whether a device
  repeats itself depends on the questions alone: comparing two clones tells a service nothing
  about whether a record changed (a memo keyed by the record would tell it exactly that), and any
  number of clones learn what the first answer told (RAPPOR's permanent randomised response). A
  changed record is reported afresh only to a question not asked before. Another origin asking the
  same question gets a fresh draw, its ε counted: the same bytes sent to two services (or to one
  under two names) would link the device's reports there, and the enrollment tokens sent with
  them, whereas two fresh draws are independent given the record, so they link a device no better
  than ε allows. (RAPPOR's other answer, a fresh randomisation of the memoised one, would still
  tie the two reports to one permanent answer, and its estimators would have to undo two
  randomisations.) Asking under many names buys a service nothing the budget does not count. Not
  for shuffled collections: a report sent through a shuffler is drawn afresh for each collection
  (its ε counted) and never memoised, since one answer in two shuffled batches would single out
  its sender among the senders the two batches share.
- **One budget per device.** A fresh draw happens only if its ε is within the app's cap per
  collection and every fresh draw on this ledger over the last ``per_days`` days, and over the
  last 365, at every origin together, stays within the app's total and yearly cap
  (:class:`participant.limits.Budget`): no spelling of an address and no number of services buys
  more. The ledger is one file: its name is resolved through symlinks, and a file with more
  than one name (a hard link, which the atomic rename below would split into two files, two
  budgets) is refused.
- **A small ledger, whatever a service asks.** At most ``Limits.max_collections`` collections at
  each origin drawn within the budget's window or never acknowledged, whatever their age
  (memoised answers included: they cost nothing, but each is an entry); counted per origin, so
  that no service can refuse the device to another (the app chooses its origins: a service cannot
  add one). The memo keeps the answers of at most ``Limits.max_memo_per_origin`` questions at an
  origin, each for ``Limits.memo_days`` after it was last given: past either, the answer given longest ago is given up (its report leaves; the question,
  asked again, is answered afresh, its ε counted). An acknowledged entry drawn on a day wholly
  before the rolling window leaves the ledger at the next write unless it holds an answer the
  memo keeps (an unacknowledged one stays, its report with it, for a retry to send unchanged);
  its ε is added to its day's sum, which the yearly cap counts (whole, while any moment of the day
  lies within the year) until it counts toward no window. So the ledger holds, per origin the app
  reports to, at most ``max_collections`` entries of the window or unacknowledged, as many of the
  day before the window, ``max_memo_per_origin`` of the memo, and two markers (16 bytes each, as
  hex) for each entry that left within the year; and a sum a day for a year.

Every change happens under an exclusive file lock on the ledger's real file (symlinks resolved;
threads and processes alike), is written to a fresh temporary file (mode 0600), fsynced and renamed
over the ledger, so a reader sees the old or the new ledger, never half of one. Reports are kept
apart, one file each in ``<ledger>.reports`` holding them compressed (zlib: a SHE report's floats
on the release grid take a third of their bytes), named by a hash of the entry's key, question
and group and of the bytes (:func:`participant.ledger_format.report_name`), and written (and
fsynced) before the ledger names it, so a change rewrites the entries and adds one report,
whatever the reports before it weigh; a report file that is missing, or does not hash to its name
with the entry that names it, is refused when it is needed (so is one entry's report named by
another: it would hand one question's answer to another), and a report leaves its directory once
no entry names it.
A report is drawn with no lock held, so a long draw never holds up another submission: the entry
is recorded after the draw under the lock, and a draw that lost the race to another is dropped
unsent. A file of any other shape than the one a device writes (:mod:`participant.ledger_format`)
is refused, never guessed at.
"""

from __future__ import annotations

import base64
import copy
import fcntl
import hashlib
import json
import os
import tempfile
import time
import zlib
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .errors import AlreadyReported, BudgetExceeded, CollectionChanged, LedgerError, LimitExceeded
from .ledger_format import (  # noqa: F401 (entry_problem: imported from here)
    MARKER_HEX,
    VERSION,
    RepeatedKey,
    _no_constant,
    clock_problem,
    entry_key,
    entry_problem,
    first_format_place,
    latest_moment,
    ledger_problem,
    marker,
    report_name,
    spend_text,
    spend_value,
    unique_keys,
)
from .limits import YEAR_DAYS, Budget, Limits  # noqa: F401 (Budget: an app imports it from here)
from .origin import normalise_origin  # noqa: F401 (imported from here)

REPORT_FIELDS = ("report", "sealed")
# The most bytes a report file may inflate to: past any report a device draws (the largest
# total domain the limits take is 2^20 entries, 8 MiB of floats), so an altered file cannot
# make the device inflate without end.
LARGEST_REPORT = 64 * 1024 * 1024

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Asked:
    """What a submission asks of the ledger: where (``origin``, ``collection``, both the app's),
    what the service published (``uid``, ``fingerprint``: used only to refuse more), the question
    (``question``, the hex digest of what decides the report's distribution, and the assigned input
    ``group`` or None) and what a fresh draw would cost (``epsilon``)."""

    origin: str
    collection: str
    uid: str
    fingerprint: str
    epsilon: float
    question: str = ""
    group: int | None = None


@dataclass(frozen=True)
class Claim:
    """The report to send for a submission: ``body`` (packed), whether the service already
    acknowledged it (``sent``), the ledger ``key`` it is kept under, the ε it ``spent`` now (0 for
    a report drawn earlier or memoised) and, for a shuffled collection, the ``sealed`` body that
    goes to the shuffler (kept, so that a retry sends the very same bytes)."""

    key: str
    body: bytes
    sent: bool
    spent: float
    sealed: bytes | None = None

    @property
    def outgoing(self) -> bytes:
        """What is sent: the sealed body for a shuffler, else the packed report."""
        return self.body if self.sealed is None else self.sealed


Sealer = Callable[[bytes], bytes]


# Every finite float is an integer over 2^1074 at most: sums of floats are kept as integers over it.
_FLOAT_SCALE = 1074


def _exact_sum(values) -> Fraction:
    """The exact sum of ``values`` (JSON numbers: floats, each a binary fraction, or integers), in
    integers over 2^1074 (a shift and an add each, where a Fraction's addition takes a gcd)."""
    scaled = 0
    for value in values:
        if isinstance(value, int):
            scaled += value << _FLOAT_SCALE
        else:
            numerator, denominator = value.as_integer_ratio()  # denominator a power of two
            scaled += numerator << (_FLOAT_SCALE + 1 - denominator.bit_length())
    return Fraction(scaled, 1 << _FLOAT_SCALE)


def _exact_days(texts) -> Fraction:
    """The exact sum of days' spends ``texts`` (each numerator/denominator over a power of two),
    in integers over the largest denominator (a shift and an add each)."""
    terms = []
    for text in texts:
        numerator, denominator = text.split("/")
        terms.append((int(numerator), int(denominator).bit_length() - 1))
    scale = max((power for _, power in terms), default=0)
    return Fraction(sum(numerator << (scale - power) for numerator, power in terms), 1 << scale)


def _day(at: float) -> int:
    """The day (since the epoch, UTC) of the time ``at`` (seconds since the epoch): exactly, as
    ``participant-js`` computes it (a day's first second is a float exactly, so comparing with it
    corrects the division's rounding)."""
    day = int(at // SECONDS_PER_DAY)
    if day * SECONDS_PER_DAY > at:
        return day - 1
    return day + 1 if (day + 1) * SECONDS_PER_DAY <= at else day


class Ledger:
    """A JSON file (mode 0600): ``{"version": 6, "entries": {key: entry}, "spent": {day: sum},
    "reported": {day: markers}}``,
    and beside it the directory ``<file>.reports`` (mode 0700) of report files.

    An entry, keyed ``"<origin> <collection id>"``, holds: ``origin`` and ``collection`` (the
    app's), ``uid`` and ``fingerprint`` (what the service published when the report was drawn),
    ``question`` and ``group`` (the question it answers, see the module's text), ``epsilon`` (the ε
    this entry spent: the collection's, or 0 when memoised), ``report`` (the name of the file
    holding the packed report, a SHA-256 of the entry and the bytes), ``sent`` (acknowledged), ``memo_of`` (the
    entry a memoised report was copied from) and the times ``reserved_at`` and ``sent_at`` (seconds
    since the epoch); for a shuffled collection, ``sealed``, the report as sealed for its shuffler,
    kept as ``report`` is. Nothing about the person's record is stored beyond the randomised
    report itself. ``spent`` holds, by day, the ε of entries that left the ledger while the yearly
    cap still counts them, and ``reported`` the markers of the collections they reported to, for a
    year (see :meth:`_expire` and :mod:`participant.ledger_format`).

    ``path`` is resolved to the real file (through symlinks), so every name of one ledger shares
    its lock and its budget.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(os.path.realpath(Path(path).expanduser()))
        self.reports = self.path.with_name(self.path.name + ".reports")
        # The ledger's bytes as this object last read or wrote them, and what they hold: parsed and
        # checked again only when the file holds other bytes.
        self._cache: tuple[bytes, dict] | None = None
        # Each entry's JSON as last written, with the entry object it encodes (see _encoded).
        self._encodings: dict[str, tuple[dict, str]] = {}

    @contextmanager
    def _locked(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise LedgerError(f"cannot open the ledger {self.path} for writing: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> dict:
        try:
            with open(self.path, "rb") as f:
                status = os.fstat(f.fileno())
                if status.st_nlink > 1:
                    raise LedgerError(
                        f"the ledger {self.path} has {status.st_nlink} names (hard links); one device keeps one "
                        "ledger file, so that all its reports share one budget: remove the other links"
                    )
                raw = f.read()
                if self._cache is not None and self._cache[0] == raw:
                    # Bytes checked before, at another reading of the clock: the clock may have
                    # been set back since, which the full check would refuse.
                    problem = clock_problem(self._cache[2], time.time())
                    if problem is not None:
                        raise LedgerError(f"the ledger {self.path} does not hold ledger entries: {problem}")
                    return self._cache[1]
        except FileNotFoundError:
            return {"version": VERSION, "entries": {}, "spent": {}, "reported": {}}
        except OSError as exc:
            raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=unique_keys)
        except UnicodeDecodeError:
            raise LedgerError(f"the ledger {self.path} is not UTF-8 text (overwritten by another program?)") from None
        except RepeatedKey:
            raise LedgerError(
                f"the ledger {self.path} repeats a key in one object, which no device writes (a reader would keep one "
                "of the two)"
            ) from None
        except (ValueError, RecursionError):
            raise LedgerError(f"the ledger {self.path} is not valid JSON (truncated or overwritten)") from None
        if isinstance(data, dict) and "version" not in data:
            data = self._from_v1(data)
        problem = ledger_problem(data, time.time())
        if problem is not None:
            raise LedgerError(f"the ledger {self.path} does not hold ledger entries: {problem}")
        for entry in data["entries"].values():
            entry.pop("record", None)  # earlier ledgers kept a keyed hash of the record; it goes at the next write
        data.pop("salt", None)
        if data["version"] == 2:  # its reports inline: each moved to its file, named as version 4 names it
            for key, entry in data["entries"].items():
                for field in REPORT_FIELDS:
                    if field in entry:
                        entry[field] = self._store(base64.b64decode(entry[field]), field, key, entry)
        elif data["version"] == 3:  # its reports' files named by their bytes alone: named anew
            data["superseded"] = self._rename(data["entries"])
        data.setdefault("spent", {})  # before version 5 every spend was an entry's
        data.setdefault("reported", {})  # before version 6 no marker was kept
        data["version"] = VERSION
        self._cache = (raw, data, latest_moment(data))
        return data

    def _rename(self, entries: dict) -> set[str]:
        """Give each report file of ``entries`` (a version 3 ledger's: named by the SHA-256 of its
        bytes) its version 4 name, a second link to the same file (or a copy where the file system
        has none), and name that in its entry; returns the names they had, for the next write to
        remove. A file that is missing is named all the same: refused, as lost, when it is needed."""
        superseded, named = set(), False
        try:
            for key, entry in entries.items():
                for field in REPORT_FIELDS:
                    if not entry.get(field):
                        continue
                    old = entry[field]
                    entry[field] = name = report_name(field, key, entry, bytes.fromhex(old))
                    superseded.add(old)
                    try:
                        os.link(self.reports / old, self.reports / name)
                    except (FileExistsError, FileNotFoundError):
                        continue  # named so already (an earlier read), or lost
                    except OSError:  # no hard links here: a copy of the (compressed) bytes
                        self._keep(self.reports / name, (self.reports / old).read_bytes(), sync_directory=False)
                    named = True
            if named:
                self._sync_reports()
        except OSError as exc:
            raise LedgerError(
                f"cannot name the reports beside the ledger {self.path} anew: {exc}; nothing was sent"
            ) from None
        return superseded

    def _sync_reports(self) -> None:
        """Make the names in the reports directory durable (before the ledger names them)."""
        directory = os.open(self.reports, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _keep(self, target: Path, raw: bytes, sync_directory: bool = True) -> None:
        """``raw`` in the file ``target`` of the reports directory: written to a fresh temporary
        file, fsynced and renamed (and the name made durable unless ``sync_directory`` is false)."""
        tmp = None
        try:
            self.reports.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.reports, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            tmp = None
            if sync_directory:
                self._sync_reports()  # the name is durable before the ledger names it
        finally:
            if tmp is not None:
                with suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _store(self, body: bytes, field: str, key: str, entry: dict) -> str:
        """The name of ``body``, the ``field`` of ``entry`` under ``key`` (see
        :func:`participant.ledger_format.report_name`), kept in the reports directory, written and
        fsynced there first if it is not ("" for no bytes: nothing to keep)."""
        if not body:
            return ""
        name = report_name(field, key, entry, hashlib.sha256(body).digest())
        target = self.reports / name
        try:
            if not target.is_file():
                self._keep(target, zlib.compress(body))
        except OSError as exc:
            raise LedgerError(f"cannot write a report beside the ledger {self.path}: {exc}; nothing was sent") from None
        return name

    def _load(self, entry: dict, field: str, key: str) -> bytes:
        """The bytes of the ``field`` of ``entry`` under ``key`` (b"" for none), from the file it
        names, checked against that name: bytes, entry and field alike."""
        name = entry[field]
        if not name:
            return b""
        try:
            inflate = zlib.decompressobj()
            body = inflate.decompress((self.reports / name).read_bytes(), LARGEST_REPORT + 1)
            if not inflate.eof or len(body) > LARGEST_REPORT:
                body = None
        except (OSError, zlib.error):
            body = None
        if body is None or report_name(field, key, entry, hashlib.sha256(body).digest()) != name:
            raise LedgerError(
                f"the ledger {self.path} lost, or holds altered or another entry's bytes of, the {field} of {key!r} "
                f"({self.reports / name}); nothing was sent"
            )
        return body

    @staticmethod
    def _named(entries: dict) -> set[str]:
        """The report files ``entries`` name."""
        return {e[field] for e in entries.values() for field in REPORT_FIELDS if e.get(field)}

    def _forget(self, names: set[str]) -> None:
        """Remove the report files of ``names`` (no entry names them now)."""
        for name in names:
            with suppress(OSError):
                os.unlink(self.reports / name)

    def _from_v1(self, entries: dict) -> dict:
        """A ledger of the first format (keyed by the published uid) as version 2 holds it, its
        reports inline: each entry keeps its report, its origin and id come from the URL it
        recorded (:func:`participant.ledger_format.first_format_place`), its spend is unknown
        (``None``, counted as the app's cap per collection). ``entries`` unchanged unless it is
        exactly a ledger of that format (refused then, as stating no version); a LedgerError if
        two of its entries name one collection (one would be lost, and its spend with it)."""
        places = [first_format_place(uid, entry) for uid, entry in entries.items()]
        if not places or None in places:
            return entries
        converted = {}
        for (uid, entry), (origin, collection) in zip(entries.items(), places):
            key = entry_key(origin, collection)
            if key in converted:
                raise LedgerError(f"the ledger {self.path} (of the first format) names the collection {key!r} twice")
            converted[key] = {
                "origin": origin,
                "collection": collection,
                "uid": uid,
                "fingerprint": entry["fingerprint"],
                "epsilon": None,
                "report": entry["report"],
                "sent": entry["sent"],
                "reserved_at": 0.0,
            }
        return {"version": 2, "entries": converted}

    def _write(self, data: dict) -> None:
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            raw = self._encoded(data)
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            self._cache = (raw, data, latest_moment(data))
        except OSError as exc:
            self._cache = None
            raise LedgerError(f"cannot write the ledger {self.path}: {exc}; nothing was sent") from None
        finally:
            if tmp is not None:
                with suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _encoded(self, data: dict) -> bytes:
        """The JSON of ``data``, each entry encoded anew only if it is another object than the one
        last encoded under its key: the ledger replaces an entry it changes, never edits one, so a
        write of thousands of entries encodes the one or two it changed."""
        encoded = {}
        for key, entry in data["entries"].items():
            kept = self._encodings.get(key)
            # json.dumps, not json.dump: the C encoder (json.dump streams through the Python one).
            encoded[key] = kept if kept is not None and kept[0] is entry else (entry, f"{json.dumps(key)}: {json.dumps(entry)}")
        self._encodings = encoded
        entries = ", ".join(text for _, text in encoded.values())
        spent, reported = json.dumps(data["spent"]), json.dumps(data["reported"])
        return (
            f'{{"version": {json.dumps(data["version"])}, "entries": {{{entries}}}, "spent": {spent}, '
            f'"reported": {reported}}}'
        ).encode()

    def entries(self) -> dict[str, dict]:
        """Every entry, by key (a copy), its ``report`` and ``sealed`` the bytes themselves (base64)."""
        with self._locked():
            entries = copy.deepcopy(self._read()["entries"])
            for key, entry in entries.items():
                for field in REPORT_FIELDS:
                    if field in entry:
                        entry[field] = base64.b64encode(self._load(entry, field, key)).decode()
            return entries

    def spent(self, limits: Limits, now: float | None = None, days: float | None = None) -> float:
        """The ε this device spent on fresh draws within the last ``days`` days (default
        ``limits.budget.per_days``; 365 for the yearly cap), at every origin."""
        with self._locked():
            return float(self._spent(self._read(), limits, time.time() if now is None else now, days))

    @staticmethod
    def _spent(data: dict, limits: Limits, now: float, days: float | None = None) -> Fraction:
        """The ε (exactly: each float ε is a binary fraction, summed without rounding, so that no
        sum of spends rounds down past the app's total) of the fresh draws of the ledger ``data``
        within ``days`` days (default the budget's window) before ``now`` (seconds since the epoch).
        A day whose spend left its entries counts whole while any moment of it lies within the
        window: never less than the entries it holds."""
        since = now - (limits.budget.per_days if days is None else days) * SECONDS_PER_DAY
        # An entry of unknown spend (first ledger format) counts at the cap, whenever it was drawn.
        drawn = _exact_sum(
            limits.max_epsilon if e["epsilon"] is None else e["epsilon"]
            for e in data["entries"].values()
            if e["epsilon"] is None or e["reserved_at"] > since
        )
        folded = _exact_days(text for day, text in data["spent"].items() if (int(day) + 1) * SECONDS_PER_DAY > since)
        return drawn + folded

    @staticmethod
    def _answers(entry: dict, asked: Asked) -> bool:
        """Whether ``entry`` answered ``asked``'s question at ``asked``'s origin. An entry of an
        earlier format has no ``question``: its spec fingerprint stands for it, and its group is
        known only when none was assigned. Another origin's answer is never repeated: the same
        bytes sent to two services would let them link the device's reports (and the tokens sent
        with them); another origin asking the same question gets a fresh draw, counted."""
        if "sealed" in entry or entry["origin"] != asked.origin:  # shuffled: never sent again anywhere
            return False
        if entry.get("question"):
            return entry["question"] == asked.question and entry.get("group") == asked.group
        return entry["fingerprint"] == asked.fingerprint and entry.get("group") == asked.group

    def _settle(
        self, data: dict, asked: Asked, limits: Limits, resend: Callable[[bytes], bytes], seal: Sealer | None = None
    ) -> Claim | None:
        """Steps 1 to 4 of :meth:`claim` on the ledger ``data`` (under the lock): the claim when
        one is due without a fresh draw (writing a memo entry), None when a fresh draw may be made."""
        entries = data["entries"]
        key = entry_key(asked.origin, asked.collection)
        entry = entries.get(key)
        if entry is None:
            # The published uid reached under another id at this origin; never at another origin, where
            # a refusal (or a re-send) would tell that origin what this device did at the first.
            key, entry = next(
                ((k, e) for k, e in entries.items() if e.get("uid") == asked.uid and e["origin"] == asked.origin),
                (key, None),
            )
        if entry is not None:
            if entry["fingerprint"] != asked.fingerprint:
                raise CollectionChanged(
                    f"this device reported to {entry['collection']!r} at {entry['origin']} under another spec "
                    f"(fingerprint {entry['fingerprint'][:16]}…, now {asked.fingerprint[:16]}…); nothing was sent"
                )
            sealed = self._load(entry, "sealed", key) if "sealed" in entry else None
            if seal is not None and sealed is None:
                # Drawn for a collection this device reported to directly: never sent sealed after.
                raise CollectionChanged(
                    f"this device reported to {entry['collection']!r} at {entry['origin']} directly; the collection "
                    "now asks for a shuffler; nothing was sent"
                )
            return Claim(key, self._load(entry, "report", key), entry["sent"], 0.0, sealed)
        if self._left(data, asked):
            raise AlreadyReported(
                f"this device already reported to collection {asked.collection!r} at {asked.origin}; "
                "a second report would spend epsilon twice"
            )
        limits.check_collection(asked.epsilon, asked.collection)
        now = time.time()
        since = now - limits.budget.per_days * SECONDS_PER_DAY
        # At this origin alone (another origin's claims never refuse this one's: no refusal tells one
        # service what another asked), unacknowledged entries whatever their age.
        held = sum(
            1 for e in entries.values() if e["origin"] == asked.origin and (e["reserved_at"] > since or not e["sent"])
        )
        if held >= limits.max_collections:
            raise LimitExceeded(
                f"this device holds {held} collections at {asked.origin} drawn in the last {limits.budget.per_days:g} "
                f"days or never acknowledged; this app holds at most {limits.max_collections} an origin "
                "(Limits.max_collections); nothing was drawn or sent"
            )
        memo = None
        if asked.question:
            memo = next((k for k in self._memo(entries, limits, now).values() if self._answers(entries[k], asked)), None)
        if memo is not None:
            body = resend(self._load(entries[memo], "report", memo))
            sealed = None if seal is None else seal(body)
            self._record(data, asked, body, 0.0, memo, limits, sealed)
            return Claim(key, body, False, 0.0, sealed)
        budget = limits.budget
        for days, total, name in ((budget.per_days, budget.total, "total"), (YEAR_DAYS, budget.yearly, "yearly cap")):
            used = self._spent(data, limits, now, days)
            if used + Fraction(asked.epsilon) > Fraction(total):
                raise BudgetExceeded(
                    f"this device spent epsilon={float(used):g} in the last {days:g} days; another "
                    f"{asked.epsilon:g} would pass this app's {name} of {total:g}; nothing was drawn or sent"
                )
        return None

    @staticmethod
    def _left(data: dict, asked: Asked) -> bool:
        """Whether the ledger ``data`` holds a marker that this device reported to ``asked``'s
        collection (its id or its published uid at its origin) in an entry that has left."""
        for wanted in (marker("collection", asked.origin, asked.collection), marker("uid", asked.origin, asked.uid)):
            for text in data["reported"].values():
                at = text.find(wanted)
                while at != -1:
                    if at % MARKER_HEX == 0:  # a whole marker, not the end of one and the start of the next
                        return True
                    at = text.find(wanted, at + 1)
        return False

    @staticmethod
    def _mark(data: dict, left: list[tuple[int, dict]], now: float, limits: Limits) -> None:
        """Add to ``data["reported"]`` the markers of the entries ``left`` (each with its day), a
        marker already held added no more, and drop the days wholly before the last year."""
        reported = data["reported"]
        if left:
            held = {text[i : i + MARKER_HEX] for text in reported.values() for i in range(0, len(text), MARKER_HEX)}
            for day, e in left:
                for mark in (marker("collection", e["origin"], e["collection"]), marker("uid", e["origin"], e["uid"])):
                    if mark not in held:
                        held.add(mark)
                        reported[str(day)] = reported.get(str(day), "") + mark
        counted = now - limits.budget.kept_days * SECONDS_PER_DAY
        for day in [day for day in reported if (int(day) + 1) * SECONDS_PER_DAY <= counted]:
            del reported[day]

    @staticmethod
    def _memo(entries: dict, limits: Limits, now: float) -> dict[tuple, str]:
        """The answers the memo keeps, by question (``(origin, question, group)``: an entry of an
        earlier format, which states no question, by its spec's fingerprint): the key of the
        newest entry holding the question's answer (a direct entry with its report, drawn within
        ``limits.memo_days`` of ``now``), for the ``limits.max_memo_per_origin`` questions at each
        origin answered most recently (ties
        by key, in code point order). The answers of every other question are given up."""
        remembered = now - limits.memo_days * SECONDS_PER_DAY
        newest: dict[tuple, str] = {}
        for key, e in entries.items():
            # A shuffled answer holds no memo, nor an answer given up (its report gone).
            if "sealed" in e or not e["report"] or e["reserved_at"] <= remembered:
                continue
            question = (e["origin"], e.get("question") or "fingerprint " + e["fingerprint"], e.get("group"))
            held = newest.get(question)
            if held is None or (entries[held]["reserved_at"], held) < (e["reserved_at"], key):
                newest[question] = key
        by_origin: dict[str, list[tuple]] = {}
        for question, key in newest.items():
            by_origin.setdefault(question[0], []).append((entries[key]["reserved_at"], key, question))
        kept = []
        for answers in by_origin.values():
            kept += sorted(answers, reverse=True)[: limits.max_memo_per_origin]
        return {question: key for _, key, question in sorted(kept, reverse=True)}

    @staticmethod
    def _expire(data: dict, limits: Limits, now: float) -> None:
        """Keep, of the ledger ``data``, what the device needs and no more, as of ``now``:

        - an entry drawn on a day wholly before the budget's rolling window, whose answer the memo
          does not keep (:meth:`_memo`), leaves, its ε added to its day's in ``data["spent"]``
          (the yearly cap counts it there: a day's sum is all the year needs of it, and at most
          one a day is kept however many collections a service asks for) once acknowledged, and
          its markers to ``data["reported"]`` (:meth:`_mark`), which refuse its collection for a year;
        - an unacknowledged entry stays, its report with it, however old: its collection, asked
          again, gets the very same bytes, never a second draw (had the first arrived, its
          answer lost, a second would count the person twice);
        - an acknowledged direct entry whose question's answer the memo gave up loses its report
          (nor does it answer the memo any more);
        - a day's spend leaves once it counts toward no window.

        Entries of unknown spend stay: they count at the cap forever."""
        entries, spent = data["entries"], data["spent"]
        memo = Ledger._memo(entries, limits, now)
        kept = set(memo.values())
        window = now - limits.budget.per_days * SECONDS_PER_DAY
        left = []
        for key, e in list(entries.items()):
            if key in kept or e["epsilon"] is None or not e["sent"]:
                continue
            day = _day(e["reserved_at"])
            if (day + 1) * SECONDS_PER_DAY <= window:
                if e["epsilon"]:
                    spent[str(day)] = spend_text(spend_value(spent.get(str(day), "0/1")) + Fraction(e["epsilon"]))
                # Its markers dated by its last send: a report re-sent for months stays refused
                # a year after the service last heard it, not after it was drawn.
                left.append((_day(max(e["reserved_at"], e.get("sent_at", 0.0))), e))
                del entries[key]
                continue
            question = (e["origin"], e.get("question") or "fingerprint " + e["fingerprint"], e.get("group"))
            if e["sent"] and e["report"] and "sealed" not in e and question not in memo:
                entries[key] = {**e, "report": ""}  # a new object: _encoded encodes anew only what is another
        counted = now - limits.budget.kept_days * SECONDS_PER_DAY
        for day in [day for day in spent if (int(day) + 1) * SECONDS_PER_DAY <= counted]:
            del spent[day]
        Ledger._mark(data, left, now, limits)

    def _record(
        self, data: dict, asked: Asked, body: bytes, spent: float, memo: str | None, limits: Limits, sealed: bytes | None
    ) -> None:
        try:
            self._add(data, asked, body, spent, memo, limits, sealed)
        except BaseException:
            self._cache = None  # ``data`` may be half changed: read the file again
            raise

    def _add(
        self, data: dict, asked: Asked, body: bytes, spent: float, memo: str | None, limits: Limits, sealed: bytes | None
    ) -> None:
        now = time.time()
        named = self._named(data["entries"])
        key = entry_key(asked.origin, asked.collection)
        entry = {
            "origin": asked.origin,
            "collection": asked.collection,
            "uid": asked.uid,
            "fingerprint": asked.fingerprint,
            "question": asked.question,
            "group": asked.group,
            "epsilon": spent,
            "report": "",
            "sent": False,
            "memo_of": memo,
            "reserved_at": now,
        }
        entry["report"] = self._store(body, "report", key, entry)
        if sealed is not None:
            entry["sealed"] = self._store(sealed, "sealed", key, entry)
        data["entries"][key] = entry
        self._expire(data, limits, now)
        self._commit(data, named)

    def _commit(self, data: dict, named: set[str]) -> None:
        """Write ``data``, then remove the report files no entry names now: of ``named`` (those
        named before the change), and those a version 3 ledger named (see :meth:`_rename`)."""
        self._write(data)
        self._forget((named | data.pop("superseded", set())) - self._named(data["entries"]))

    def claim(
        self,
        asked: Asked,
        limits: Limits,
        draw: Callable[[], bytes],
        resend: Callable[[bytes], bytes],
        seal: Sealer | None = None,
    ) -> Claim:
        """The report for ``asked``, recorded before it is sent.

        ``draw()`` draws and packs a fresh report, ``resend(body)`` repacks an earlier report's
        randomised answer for this collection (a new report id, this collection's spec digest and
        token), and ``seal(body)``, for a shuffled collection, seals a new report for its shuffler
        (the sealed bytes are recorded with it: a retry re-sends them). In order:

        1. this collection (or the published ``uid``, reached under another id at this origin)
           has an entry: its report, unchanged; :class:`CollectionChanged` if its spec differs now;
           :class:`AlreadyReported` if an entry of it left, and its marker is held (within a year);
           :class:`LimitExceeded` if the origin holds ``limits.max_collections`` entries drawn
           within the window or never acknowledged;
        2. :class:`BudgetExceeded` if the collection's ε is above ``limits.max_epsilon``;
        3. an entry at this origin that answered the same question (``asked.question`` and
           ``asked.group``): its randomised answer again (spends 0), whatever the record now is;
        4. :class:`BudgetExceeded` if the device's spend over the budget's window, or over the
           year, would pass its total or yearly cap; else a fresh draw, spending the collection's ε.

        Nothing random is drawn before 4, and the draw runs with no lock held; steps 1 to 4 are
        then taken again under the lock, so a claim that another thread or process recorded
        meanwhile wins and this draw is dropped, never sent. Atomic across threads and processes.
        """
        if seal is not None and asked.question:
            # The reader refuses a shuffled entry holding a question: never write one.
            raise ValueError("a shuffled collection's answer is never memoised: ask it without a question")
        with self._locked():
            settled = self._settle(self._read(), asked, limits, resend, seal)
        if settled is not None:
            return settled
        body = draw()
        sealed = None if seal is None else seal(body)
        with self._locked():
            data = self._read()
            settled = self._settle(data, asked, limits, resend, seal)
            if settled is not None:
                return settled
            self._record(data, asked, body, asked.epsilon, None, limits, sealed)
        return Claim(entry_key(asked.origin, asked.collection), body, False, asked.epsilon, sealed)

    def mark_sent(self, key: str) -> None:
        """Record that the service acknowledged the report under ``key``."""
        with self._locked():
            data = self._read()
            entry = data["entries"].get(key)
            if entry is None:
                raise LedgerError(f"the ledger {self.path} lost the entry {key!r} while its report was sent")
            named = self._named(data["entries"])
            # A new object, never an edit: _encoded encodes anew only what is another object.
            entry = data["entries"][key] = {**entry, "sent": True, "sent_at": time.time()}
            self._drop_acknowledged(data["entries"], entry)
            self._commit(data, named)

    def reseal(self, key: str, sealed: bytes) -> None:
        """Replace the sealed copy of the unsent shuffled entry under ``key`` with ``sealed`` (the
        same sealed report with what its anonymous token needs behind it: the pending request,
        then the token), written before anything is sent with it, so that a retry after a crash
        re-sends the very same bytes."""
        with self._locked():
            data = self._read()
            entry = data["entries"].get(key)
            if entry is None or "sealed" not in entry or entry["sent"]:
                raise LedgerError(f"the ledger {self.path} holds no unsent shuffled entry {key!r} to attach a token to")
            named = self._named(data["entries"])
            data["entries"][key] = {**entry, "sealed": self._store(sealed, "sealed", key, entry)}
            self._commit(data, named)

    @staticmethod
    def _drop_acknowledged(entries: dict, entry: dict) -> None:
        """Empty, once ``entry`` is acknowledged, the copies of a report the device needs no
        more (the rules of ``participant-js/src/ledger.ts`` too): a shuffled entry's report and
        sealed copy, never sent again and never an answer to repeat. (A direct entry keeps its
        report: the memo may repeat it.)"""
        if "sealed" in entry:
            entry["report"] = entry["sealed"] = ""
