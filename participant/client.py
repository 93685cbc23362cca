"""Talking to an aggregator: fetch a collection's spec, send the one report, and never a second.

The ledger is what keeps the privacy promise on the device: a report is written to it *before*
it is sent, so a retry (or a restart after a crash) re-sends the very same report (same id, same
randomness) instead of drawing a new one, and a collection already reported to is refused.
Drawing a second report for the same collection would spend ε twice.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections.abc import Mapping
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


class Ledger:
    """A JSON file of the collections this device has reported to.

    Each entry, keyed by the collection's URL, holds the packed report and whether the aggregator
    acknowledged it. Writes replace the file atomically.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()

    def _read(self) -> dict:
        if not self.path.exists():
            return {}
        return json.loads(self.path.read_text())

    def _write(self, entries: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(entries, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def entry(self, key: str) -> dict | None:
        return self._read().get(key)

    def reserve(self, key: str, body: bytes) -> None:
        """Record ``body`` as this device's report for ``key`` before it is sent."""
        entries = self._read()
        if key in entries:
            raise AlreadyReported(f"a report for {key} is already in the ledger {self.path}")
        entries[key] = {"report": base64.b64encode(body).decode(), "sent": False, "reserved_at": time.time()}
        self._write(entries)

    def pending_body(self, key: str) -> bytes | None:
        entry = self.entry(key)
        return None if entry is None or entry["sent"] else base64.b64decode(entry["report"])

    def mark_sent(self, key: str) -> None:
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

    async def fetch_spec(self, collection_id: str) -> CollectionSpec:
        """The collection's published spec."""
        status, body, ctype = await self._request(
            "GET", self.collection_url(collection_id), headers={"Accept": MSGPACK}
        )
        data = self._decode(body, ctype)
        if status != 200:
            raise ReportRejected(status, data.get("error", "") if isinstance(data, dict) else str(data))
        return CollectionSpec.from_dict(data["spec"])

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
        spec: CollectionSpec | None = None,
        token: str | None = None,
    ) -> str:
        """Build this person's one report for ``record`` and send it; returns the server's status.

        ``token`` is the enrollment token the operator gave this person, for collections that
        require one.

        Raises :class:`AlreadyReported` if the ledger shows a report already acknowledged; a
        pending one (sent but never acknowledged) is re-sent unchanged rather than redrawn.
        """
        key = self.collection_url(collection_id)
        if self.ledger is not None:
            entry = self.ledger.entry(key)
            if entry is not None and entry["sent"]:
                raise AlreadyReported(
                    f"this device already reported to {key}; a second report would spend epsilon twice"
                )
            if entry is not None:
                return await self._send_and_record(collection_id, key, self.ledger.pending_body(key))
        spec = spec or await self.fetch_spec(collection_id)
        report: Report = Participant(spec, rng=self.rng).report(record, group)
        body = pack_report(report, spec, token)
        if self.ledger is not None:
            self.ledger.reserve(key, body)
        return await self._send_and_record(collection_id, key, body)

    async def _send_and_record(self, collection_id: str, key: str, body: bytes) -> str:
        status = await self.send_report(collection_id, body)
        if self.ledger is not None:
            self.ledger.mark_sent(key)
        return status


class Client:
    """A synchronous wrapper of :class:`AsyncClient` for apps without an event loop."""

    def __init__(self, base_url: str, *, ledger: Ledger | str | os.PathLike | None, **options):
        self.base_url = base_url
        self.ledger = ledger
        self.options = options

    def _run(self, method: str, *args, **kwargs):
        async def call():
            async with AsyncClient(self.base_url, ledger=self.ledger, **self.options) as client:
                return await getattr(client, method)(*args, **kwargs)

        return asyncio.run(call())

    def fetch_spec(self, collection_id: str) -> CollectionSpec:
        return self._run("fetch_spec", collection_id)

    def submit(
        self, collection_id: str, record: Mapping[str, object], group: int | None = None, token: str | None = None
    ) -> str:
        return self._run("submit", collection_id, record, group, None, token)
