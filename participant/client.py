"""Talking to an aggregator: fetch a collection's spec, send the one report, and never a second.

The ledger is what keeps the privacy promise on the device: a report is written to it *before*
it is sent, so a retry (or a restart after a crash) re-sends the very same report (same id, same
randomness) instead of drawing a new one, and a collection already reported to is refused.
Drawing a second report for the same collection would spend ε twice.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import os
import random
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import msgpack

from .reporting import Participant, Report
from .spec import CollectionSpec
from .wire import pack_report

MSGPACK = "application/msgpack"


class ClientError(Exception):
    """Base of the client's errors."""


class AlreadyReported(ClientError):
    """This device has already reported to the collection; a second report would spend ε again."""


class ReportRejected(ClientError):
    """The aggregator refused the request (4xx): retrying would not help. ``status`` and the
    server's message say why."""

    def __init__(self, status: int, message: str):
        super().__init__(f"aggregator answered {status}: {message}")
        self.status = status


class SubmissionFailed(ClientError):
    """The aggregator could not be reached, or kept failing, through every retry. The report
    stays pending in the ledger and is re-sent unchanged by the next ``submit``."""


class LedgerError(ClientError):
    """The ledger file cannot be read or is not a ledger (truncated, garbage, wrong types). Nothing
    is sent: without a trustworthy ledger the device cannot know whether it already reported."""


@dataclass(frozen=True)
class Published:
    """What the service publishes for a collection: its id there, its globally unique ``uid``
    (what the ledger is keyed by, whatever address reached the service), the spec and the
    spec's fingerprint."""

    collection_id: str
    uid: str
    spec: CollectionSpec

    @classmethod
    def from_answer(cls, data) -> Published:
        try:
            spec = CollectionSpec.from_dict(data["spec"])
            uid, fingerprint = data["uid"], data["fingerprint"]
        except (KeyError, TypeError) as exc:
            raise ClientError(f"the service's description of the collection lacks {exc}") from None
        if not isinstance(uid, str) or len(uid) < 16:
            raise ClientError("the service published no usable collection identity (uid)")
        if fingerprint != spec.fingerprint:
            raise ClientError("the published spec does not match its fingerprint; refusing to report")
        return cls(data["id"], uid, spec)


class Ledger:
    """A JSON file of the collections this device has reported to, keyed by the collection's
    globally unique id as the service publishes it.

    Each entry holds the packed report and whether the service acknowledged it. Every change
    happens under an exclusive file lock (threads and processes alike), is written to a fresh
    temporary file (mode 0600) and renamed over the ledger, so a reader sees the old or the new
    ledger, never half of one.
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
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
        try:
            entries = json.loads(text)
        except ValueError:
            raise LedgerError(f"the ledger {self.path} is not valid JSON (truncated or overwritten)") from None
        if not isinstance(entries, dict) or not all(self._valid(e) for e in entries.values()):
            raise LedgerError(f"the ledger {self.path} does not hold ledger entries")
        return entries

    @staticmethod
    def _valid(entry) -> bool:
        if not isinstance(entry, dict) or not isinstance(entry.get("sent"), bool):
            return False
        try:
            base64.b64decode(entry["report"], validate=True)
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def _write(self, entries: dict) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def entry(self, key: str) -> dict | None:
        with self._locked():
            return self._read().get(key)

    def claim(self, key: str, make_body, **about) -> tuple[bytes, bool]:
        """This device's report for ``key``: the one in the ledger, or a new one from
        ``make_body()`` recorded (with ``about``) before it is sent. Returns ``(body, sent)``,
        ``sent`` saying whether the service already acknowledged it. Atomic across threads and
        processes: whoever comes second gets the first one's report."""
        with self._locked():
            entries = self._read()
            entry = entries.get(key)
            if entry is not None:
                return base64.b64decode(entry["report"]), entry["sent"]
            body = make_body()
            entries[key] = {"report": base64.b64encode(body).decode(), "sent": False, "reserved_at": time.time(), **about}
            self._write(entries)
            return body, False

    def pending_body(self, key: str) -> bytes | None:
        entry = self.entry(key)
        return None if entry is None or entry["sent"] else base64.b64decode(entry["report"])

    def mark_sent(self, key: str) -> None:
        with self._locked():
            entries = self._read()
            entries[key]["sent"] = True
            entries[key]["sent_at"] = time.time()
            self._write(entries)


class AsyncClient:
    """An async client for one aggregator at ``base_url``.

    ``ledger`` is a :class:`Ledger` or a path for one; pass ``None`` only in simulations, where no
    real person is reporting. Network errors, 5xx and 429 answers are retried ``retries`` times
    with exponential backoff (``backoff`` seconds, doubled each time, with jitter); the report id
    makes retries safe. ``rng`` defaults to the secure source.
    """

    def __init__(
        self,
        base_url: str,
        *,
        ledger: Ledger | str | os.PathLike | None,
        session: aiohttp.ClientSession | None = None,
        rng=None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 10.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)
        self._session = session
        self._owns_session = session is None
        self.rng = rng
        self.retries = retries
        self.backoff = backoff
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    def collection_url(self, collection_id: str) -> str:
        return f"{self.base_url}/collections/{collection_id}"

    async def _request(self, method: str, url: str, **kwargs) -> tuple[int, bytes, str]:
        """``(status, body, content type)`` of the first non-retryable answer; raises
        :class:`SubmissionFailed` when every attempt failed."""
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1)
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                async with self.session.request(method, url, **kwargs) as response:
                    body = await response.read()
                    if response.status >= 500 or response.status == 429:
                        last = f"{response.status} {body[:200]!r}"
                        continue
                    return response.status, body, response.content_type
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise SubmissionFailed(f"{method} {url} failed after {self.retries + 1} attempts; last: {last}")

    @staticmethod
    def _decode(body: bytes, content_type: str):
        return msgpack.unpackb(body) if content_type == MSGPACK else json.loads(body or b"null")

    async def fetch_collection(self, collection_id: str) -> Published:
        """What the service publishes for the collection: its globally unique id and its spec
        (checked against the published fingerprint)."""
        status, body, ctype = await self._request(
            "GET", self.collection_url(collection_id), headers={"Accept": MSGPACK}
        )
        data = self._decode(body, ctype)
        if status != 200:
            raise ReportRejected(status, data.get("error", "") if isinstance(data, dict) else str(data))
        return Published.from_answer(data)

    async def fetch_spec(self, collection_id: str) -> CollectionSpec:
        """The collection's published spec."""
        return (await self.fetch_collection(collection_id)).spec

    async def send_report(self, collection_id: str, body: bytes) -> str:
        """POST one packed report; returns ``"accepted"`` or ``"duplicate"`` (already stored)."""
        status, answer, ctype = await self._request(
            "POST",
            self.collection_url(collection_id) + "/reports",
            data=body,
            headers={"Content-Type": MSGPACK, "Accept": MSGPACK},
        )
        data = self._decode(answer, ctype)
        if status not in (200, 201):
            raise ReportRejected(status, data.get("error", "") if isinstance(data, dict) else str(data))
        return data["status"]

    async def submit(
        self,
        collection_id: str,
        record: Mapping[str, object],
        group: int | None = None,
        published: Published | None = None,
        token: str | None = None,
    ) -> str:
        """Build this person's one report for ``record`` and send it; returns the server's status.

        The collection's identity and spec are fetched from the service first (or taken from
        ``published``, an earlier :meth:`fetch_collection`); the ledger is keyed by that identity,
        so no address, host name or proxy opens a second report. ``token`` is the enrollment token
        the operator gave this person, for collections that require one.

        Raises :class:`AlreadyReported` if the ledger shows a report already acknowledged; a
        pending one (recorded but never acknowledged) is re-sent unchanged rather than redrawn.
        Raises :class:`LedgerError`, sending nothing, if the ledger is unreadable.
        """
        published = published or await self.fetch_collection(collection_id)
        spec = published.spec

        def make_body() -> bytes:
            report: Report = Participant(spec, rng=self.rng).report(record, group)
            return pack_report(report, spec, token)

        if self.ledger is None:
            return await self.send_report(collection_id, make_body())
        about = {"collection": self.collection_url(collection_id), "fingerprint": spec.fingerprint}
        # The ledger's file lock may wait on another process: off the event loop.
        body, sent = await asyncio.to_thread(self.ledger.claim, published.uid, make_body, **about)
        if sent:
            raise AlreadyReported(
                f"this device already reported to collection {published.uid} ({about['collection']}); "
                "a second report would spend epsilon twice"
            )
        status = await self.send_report(collection_id, body)
        await asyncio.to_thread(self.ledger.mark_sent, published.uid)
        return status


class Client:
    """A synchronous wrapper of :class:`AsyncClient`, safe to call from several threads and from
    code that already runs an asyncio event loop (each call runs its own loop, on a helper thread
    when the calling thread has one running)."""

    def __init__(self, base_url: str, *, ledger: Ledger | str | os.PathLike | None, **options):
        self.base_url = base_url
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)
        self.options = options

    def _run(self, method: str, *args, **kwargs):
        async def call():
            async with AsyncClient(self.base_url, ledger=self.ledger, **self.options) as client:
                return await getattr(client, method)(*args, **kwargs)

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(call())
        outcome: dict = {}

        def in_thread():
            try:
                outcome["value"] = asyncio.run(call())
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc

        helper = threading.Thread(target=in_thread, name="ldpnb-client")
        helper.start()
        helper.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def fetch_collection(self, collection_id: str) -> Published:
        return self._run("fetch_collection", collection_id)

    def fetch_spec(self, collection_id: str) -> CollectionSpec:
        return self._run("fetch_spec", collection_id)

    def submit(
        self, collection_id: str, record: Mapping[str, object], group: int | None = None, token: str | None = None
    ) -> str:
        return self._run("submit", collection_id, record, group, None, token)
