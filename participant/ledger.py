"""The device's ledger: what it reported, where, and what that spent; and the limits it keeps.

Everything here is decided on the device from what the app configured, never from what a service
publishes: an entry is keyed by the origin the app gave the client (normalised) and the collection
id the app asked for, and the ε a collection may cost is capped by the app's :class:`Limits`. What
a service publishes (its ``uid``, its spec) can only make the device refuse more, never spend more:

- a collection id already reported to at this origin is never reported to again; if the service
  now publishes another spec for it, the device refuses (:class:`CollectionChanged`). The one
  exception: a report never acknowledged is re-sent, the very same bytes, which reveal nothing new;
- a collection whose spec equals one already reported to at this origin (same fingerprint), for
  an unchanged record, gets that same randomised report again and costs nothing (RAPPOR's
  memoised response): cloning a collection under new ids buys a service nothing;
- a fresh draw happens only if its ε is within the app's cap per collection and the origin's
  spend over the last ``per_days`` days stays within the app's total.

Every change happens under an exclusive file lock (threads and processes alike), is written to a
fresh temporary file (mode 0600), fsynced and renamed over the ledger, so a reader sees the old or
the new ledger, never half of one.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit

from .errors import BudgetExceeded, CollectionChanged, LedgerError
from .limits import Budget, Limits  # noqa: F401 (Budget: an app imports it from here)

VERSION = 2
SECONDS_PER_DAY = 86_400.0


def normalise_origin(base_url: str) -> str:
    """The service address as the ledger keys it: scheme and host lower-cased, the default port
    dropped, repeated and trailing slashes of the path removed (``HTTP://Host:80//api/`` and
    ``http://host/api`` are one origin). Raises ``ValueError`` for an address without scheme or host."""
    parts = urlsplit(base_url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"the aggregator's address must be an http(s) URL with a host, got {base_url!r}")
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None and parts.port != {"http": 80, "https": 443}[scheme]:
        netloc += f":{parts.port}"
    return f"{scheme}://{netloc}{re.sub('/+', '/', parts.path).rstrip('/')}"


@dataclass(frozen=True)
class Asked:
    """What a submission asks of the ledger: where (``origin``, ``collection``, both the app's),
    what the service published (``uid``, ``fingerprint``: used only to refuse more) and what a
    fresh draw would cost (``epsilon``)."""

    origin: str
    collection: str
    uid: str
    fingerprint: str
    epsilon: float


@dataclass(frozen=True)
class Claim:
    """The report to send for a submission: ``body`` (packed), whether the service already
    acknowledged it (``sent``), the ledger ``key`` it is kept under and the ε it ``spent`` now
    (0 for a report drawn earlier or memoised)."""

    key: str
    body: bytes
    sent: bool
    spent: float


def entry_key(origin: str, collection: str) -> str:
    return f"{origin} {collection}"


class Ledger:
    """A JSON file (mode 0600): ``{"version": 2, "salt": hex, "entries": {key: entry}}``.

    An entry, keyed ``"<origin> <collection id>"``, holds: ``origin`` and ``collection`` (the
    app's), ``uid`` and ``fingerprint`` (what the service published when the report was drawn),
    ``epsilon`` (the ε this entry spent: the collection's, or 0 when memoised), ``report`` (the
    packed report, base64), ``sent`` (acknowledged), ``record`` (a keyed hash of the encoded
    record, to recognise an unchanged record; the key is ``salt``, so the hash of a record cannot
    be looked up in a table made elsewhere), ``memo_of`` (the entry a memoised report was copied
    from) and the times ``reserved_at`` and ``sent_at`` (seconds since the epoch).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()

    @contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> dict:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"version": VERSION, "salt": secrets.token_hex(16), "entries": {}}
        except (OSError, UnicodeDecodeError) as exc:
            raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise LedgerError(f"the ledger {self.path} is not valid JSON (truncated or overwritten)") from None
        if isinstance(data, dict) and "version" not in data and all(self._valid_v1(e) for e in data.values()):
            data = self._from_v1(data)
        if (
            not isinstance(data, dict)
            or data.get("version") != VERSION
            or not isinstance(data.get("salt"), str)
            or not isinstance(data.get("entries"), dict)
            or not all(self._valid(e) for e in data["entries"].values())
        ):
            raise LedgerError(f"the ledger {self.path} does not hold ledger entries")
        return data

    @staticmethod
    def _report_ok(entry) -> bool:
        try:
            base64.b64decode(entry["report"], validate=True)
        except (KeyError, TypeError, ValueError):
            return False
        return True

    @classmethod
    def _valid_v1(cls, entry) -> bool:
        return isinstance(entry, dict) and isinstance(entry.get("sent"), bool) and cls._report_ok(entry)

    @classmethod
    def _valid(cls, entry) -> bool:
        if not cls._valid_v1(entry):
            return False
        spent = entry.get("epsilon")
        return (
            isinstance(entry.get("fingerprint"), str)
            and isinstance(entry.get("reserved_at"), (int, float))
            and (spent is None or (isinstance(spent, (int, float)) and spent >= 0))
        )

    @staticmethod
    def _from_v1(entries: dict) -> dict:
        """A ledger of the first format (keyed by the published uid): each entry keeps its report;
        its origin and id come from the URL it recorded, its spend is unknown (``None``, counted
        as the app's cap per collection)."""
        converted = {}
        for uid, entry in entries.items():
            url = str(entry.get("collection", ""))
            origin, _, collection = url.rpartition("/collections/")
            with suppress(ValueError):
                origin = normalise_origin(origin)
            converted[entry_key(origin, collection or uid)] = {
                "fingerprint": "",
                "reserved_at": 0.0,
                **entry,
                "origin": origin,
                "collection": collection or uid,
                "uid": uid,
                "epsilon": None,
            }
        return {"version": VERSION, "salt": secrets.token_hex(16), "entries": converted}

    def _write(self, data: dict) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def entries(self) -> dict[str, dict]:
        """Every entry, by key (a copy)."""
        with self._locked():
            return self._read()["entries"]

    def spent(self, origin: str, limits: Limits, now: float | None = None) -> float:
        """The ε this device spent at ``origin`` within the last ``limits.budget.per_days`` days."""
        with self._locked():
            return float(self._spent(self._read()["entries"], origin, limits, time.time() if now is None else now))

    @staticmethod
    def _spent(entries: dict, origin: str, limits: Limits, now: float) -> Fraction:
        """Exactly (each float ε is a binary fraction, summed without rounding), so that no sum of
        spends rounds down past the app's total."""
        since = now - limits.budget.per_days * SECONDS_PER_DAY
        # An entry of unknown spend (first ledger format) counts at the cap, whenever it was drawn.
        return sum(
            (
                Fraction(limits.max_epsilon if e["epsilon"] is None else e["epsilon"])
                for e in entries.values()
                if e.get("origin") == origin and (e["epsilon"] is None or e["reserved_at"] > since)
            ),
            Fraction(0),
        )

    def claim(
        self,
        asked: Asked,
        limits: Limits,
        record: bytes,
        draw: Callable[[], bytes],
        resend: Callable[[bytes], bytes],
    ) -> Claim:
        """The report for ``asked``, recorded before it is sent.

        ``record`` is the encoded record (and assigned group) a fresh draw would randomise;
        ``draw()`` draws and packs a fresh report, ``resend(body)`` repacks an earlier report's
        randomised answer for this collection (a new report id, this collection's token). In order:

        1. this collection (or the published ``uid``, reached under another name) has an entry:
           its report, unchanged; :class:`CollectionChanged` if its spec differs now;
        2. :class:`BudgetExceeded` if the collection's ε is above ``limits.max_epsilon``;
        3. an entry at this origin with the same spec fingerprint and the same record: its
           randomised answer again (spends 0);
        4. :class:`BudgetExceeded` if the spend at this origin over the budget's window would pass
           its total; else a fresh draw, spending the collection's ε.

        Nothing random is drawn before 4. Atomic across threads and processes.
        """
        with self._locked():
            data = self._read()
            entries = data["entries"]
            key = entry_key(asked.origin, asked.collection)
            entry = entries.get(key)
            if entry is None:
                key, entry = next(((k, e) for k, e in entries.items() if e.get("uid") == asked.uid), (key, None))
            if entry is not None:
                if entry["fingerprint"] != asked.fingerprint:
                    raise CollectionChanged(
                        f"this device reported to {entry['collection']!r} at {entry['origin']} under another spec "
                        f"(fingerprint {entry['fingerprint'][:16]}…, now {asked.fingerprint[:16]}…); nothing was sent"
                    )
                return Claim(key, base64.b64decode(entry["report"]), entry["sent"], 0.0)
            limits.check_collection(asked.epsilon, asked.collection)
            now = time.time()
            digest = hmac.new(bytes.fromhex(data["salt"]), record, hashlib.sha256).hexdigest()
            memo = next(
                (
                    k
                    for k, e in entries.items()
                    if e.get("origin") == asked.origin
                    and e["fingerprint"] == asked.fingerprint
                    and hmac.compare_digest(e.get("record") or "", digest)
                ),
                None,
            )
            if memo is not None:
                body, spent = resend(base64.b64decode(entries[memo]["report"])), 0.0
            else:
                used = self._spent(entries, asked.origin, limits, now)
                if used + Fraction(asked.epsilon) > Fraction(limits.budget.total):
                    raise BudgetExceeded(
                        f"this device spent epsilon={float(used):g} at {asked.origin} in the last "
                        f"{limits.budget.per_days:g} days; another {asked.epsilon:g} would pass this app's total of "
                        f"{limits.budget.total:g}; nothing was drawn or sent"
                    )
                body, spent = draw(), asked.epsilon
            entries[key] = {
                "origin": asked.origin,
                "collection": asked.collection,
                "uid": asked.uid,
                "fingerprint": asked.fingerprint,
                "epsilon": spent,
                "report": base64.b64encode(body).decode(),
                "sent": False,
                "record": digest,
                "memo_of": memo,
                "reserved_at": now,
            }
            self._write(data)
            return Claim(key, body, False, spent)

    def mark_sent(self, key: str) -> None:
        """Record that the service acknowledged the report under ``key``."""
        with self._locked():
            data = self._read()
            data["entries"][key]["sent"] = True
            data["entries"][key]["sent_at"] = time.time()
            self._write(data)

