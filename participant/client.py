"""Talking to an aggregator: fetch a collection's spec, send the one report, and never a second.

The ledger (:mod:`participant.ledger`) is what keeps the privacy promise on the device: a report is
written to it *before* it is sent, so a retry (or a restart after a crash) re-sends the very same
report (same id, same randomness) instead of drawing a new one, and a collection already reported
to is refused. What the device spends is decided from the ledger and the app's :class:`Limits`,
never from what the service publishes.

Timing: the report leaves a fixed ``pace`` after the spec arrived (or the next multiple of it, if
building the report took longer), so the moment a service sees it does not depend on the record or
on the noise drawn (the exact discrete Laplace sampler's running time does: SHE, THE and the
Laplace mean, which is why ``pace=0`` is refused for them).

What a service sends is read within the app's :class:`~participant.limits.Limits` (a bounded
stream, a spec counted before it is built), and anything it sends that cannot be used raises a
:class:`~participant.errors.ParticipantError`, never another exception.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import msgpack

from .errors import (
    AlreadyReported,
    BudgetExceeded,
    ClientError,
    CollectionChanged,
    LedgerError,
    LimitExceeded,
    ParticipantError,
    ReportRejected,
    SpecError,
    SubmissionFailed,
)
from .ledger import Asked, Claim, Ledger
from .limits import Budget, Limits
from .origin import normalise_origin
from .reporting import Participant
from .retrying import (
    DEFAULT_MAX_RETRY_AFTER,
    DEFAULT_RETRY_DEADLINE,
    last_answer,
    option,
    party,
    retry_after,
    wait_before,
)
from .spec import CollectionSpec
from .view import ShuffledView
from .wire import pack_report, rewrap

if TYPE_CHECKING:
    import aiohttp


def _aiohttp():
    """aiohttp, imported when a client first needs it: an app that imports the library, or only
    builds reports, does not pay its 0.1 s."""
    import aiohttp

    return aiohttp

MSGPACK = "application/msgpack"
#: The content type of a sealed report (participant.sealing), as a shuffler takes it.
SEALED = "application/ldpnb-sealed"
#: Seconds from the spec's arrival to the report's departure (a whole multiple of it when drawing took longer).
DEFAULT_PACE = 0.2

__all__ = [
    "AlreadyReported",
    "AsyncClient",
    "Budget",
    "BudgetExceeded",
    "Client",
    "ClientError",
    "CollectionChanged",
    "Ledger",
    "LedgerError",
    "LimitExceeded",
    "Limits",
    "ParticipantError",
    "Published",
    "ReportRejected",
    "SubmissionFailed",
    "pace_from",
    "paced_wait",
]


def paced_wait(elapsed: float, pace: float) -> float:
    """Seconds to wait after ``elapsed`` seconds so that the total is the smallest positive whole
    multiple of ``pace`` (0 when ``pace`` is 0: no pacing)."""
    if pace <= 0:
        return 0.0
    return max(1, math.ceil(elapsed / pace)) * pace - elapsed


# The pacing clock and its wait, named here so that a test can run them on a virtual clock.
_monotonic = time.monotonic
_sleep = time.sleep


def _sleep_until(deadline: float) -> None:
    while (left := deadline - _monotonic()) > 0:
        _sleep(left)


async def pace_from(start: float, pace: float) -> None:
    """Return at ``start + paced_wait(...)`` on the ``time.monotonic`` clock. The wait runs on a
    helper thread: the event loop's own timers wake on whole milliseconds counted from when the
    wait began (epoll's resolution), which would carry the sampling time into the sending time."""
    wait = paced_wait(_monotonic() - start, pace)
    if wait > 0:
        await asyncio.to_thread(_sleep_until, _monotonic() + wait)


@dataclass(frozen=True)
class Published:
    """What the service publishes for a collection: its id there, its ``uid`` (random, unique to
    the collection; the ledger records it and refuses a uid it already reported to under another
    address, but never keys its spending by it), the spec and the spec's fingerprint."""

    collection_id: str
    uid: str
    spec: CollectionSpec

    @classmethod
    def from_answer(cls, data, limits: Limits | None = None) -> Published:
        """The collection a service's answer describes, checked: the spec's declared size against
        ``limits`` before it is built (:class:`LimitExceeded`), then the spec itself
        (:class:`SpecError`), its identity and its fingerprint (:class:`ClientError`)."""
        if not isinstance(data, dict):
            raise ClientError("the service's description of the collection is not a mapping")
        try:
            raw, uid, fingerprint, collection_id = data["spec"], data["uid"], data["fingerprint"], data["id"]
        except KeyError as exc:
            raise ClientError(f"the service's description of the collection lacks {exc}") from None
        if not isinstance(uid, str) or not 16 <= len(uid) <= 256:
            raise ClientError("the service published no usable collection identity (uid)")
        if not isinstance(collection_id, str) or not isinstance(fingerprint, str):
            raise ClientError("the service published a collection id or fingerprint that is not text")
        (limits or Limits()).check_spec(raw, collection_id)
        spec = CollectionSpec.published(raw)
        if fingerprint != spec.fingerprint:
            raise ClientError("the published spec does not match its fingerprint; refusing to report")
        return cls(collection_id, uid, spec)


def _timing_exposed(spec: CollectionSpec) -> bool:
    """Whether some input's draw time follows its noise (the exact discrete Laplace sampler of
    SHE, THE and the Laplace mean), so that only pacing hides it."""
    return any(o.wire_kind == "floats" for o in spec.oracles)


class AsyncClient:
    """An async client for one aggregator at ``base_url`` (the origin the ledger keys by).

    ``ledger`` is a :class:`Ledger` or a path for one; pass ``None`` only in simulations, where no
    real person is reporting. ``limits`` (:class:`Limits`) bound what this device spends and reads
    whatever the service publishes: ε per collection, a budget for the whole device over a window
    of days, the sizes of specs and answers, the domains and draw times a spec may ask; the
    defaults (2 per collection, 8 over 30 days, ...) protect a person whose app never sets them.
    ``max_epsilon`` and ``budget`` replace those two fields of ``limits``. ``shuffler`` is the URL
    of the shuffler this app trusts with shuffled collections (None: it reports to none of them);
    an app that pins one reports to no collection unshuffled but the ids it names in ``direct``
    (the collections at this aggregator it accepts reporting to directly), and to none of those
    that its shuffler holds a shuffled view of. ``pace`` (seconds)
    fixes when the report leaves after the spec arrived (0 is refused for mechanisms whose draw
    time follows their noise). Network errors, 5xx and 429 answers are
    retried ``retries`` times, re-sending the same bytes (the report id makes retries safe), after
    an exponential backoff (``backoff`` seconds, doubled each time, with jitter) or, when a 429 or
    503 answer's ``Retry-After`` asks longer, that long and up to a fifth more; a ``Retry-After``
    of more than ``max_retry_after`` seconds (default 60), or a wait that would end past
    ``retry_deadline`` seconds (default 300) after the first attempt, ends the attempts at once, so
    that no service stalls a device for long. The wait depends only on the service's answers, never
    on the person's record (:mod:`participant.retrying`); the :class:`SubmissionFailed` that ends
    the attempts names the party that refused and the option that lifts its limit. ``rng``
    defaults to the secure source.
    ``strict=True`` refuses a record holding a key its spec does not know, lacking a field, or
    holding a value it does not declare (:class:`~participant.errors.RecordError`; see
    :class:`~participant.reporting.Participant`), before anything is drawn, the ledger touched or
    sent: the refusal is the app's to see, never the service's. By default such a record is
    reported (unknown keys and wrong-case values warned of), so that whether a report is sent
    never depends on what a person answered.
    """

    def __init__(
        self,
        base_url: str,
        *,
        ledger: Ledger | str | os.PathLike | None,
        max_epsilon: float | None = None,
        budget: Budget | None = None,
        limits: Limits | None = None,
        shuffler: str | None = None,
        direct: Iterable[str] = (),
        pace: float = DEFAULT_PACE,
        session: aiohttp.ClientSession | None = None,
        rng=None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 10.0,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        retry_deadline: float = DEFAULT_RETRY_DEADLINE,
        strict: bool = False,
    ):
        self.origin = normalise_origin(base_url)
        self.base_url = self.origin  # requests go where the ledger says they went
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)
        limits = limits or Limits()
        if max_epsilon is not None:
            limits = replace(limits, max_epsilon=max_epsilon)
        if budget is not None:
            limits = replace(limits, budget=budget)
        self.limits = limits
        self.shuffler = None if shuffler is None else shuffler_url(shuffler)
        self.direct = direct_ids(direct)
        if isinstance(pace, bool) or not isinstance(pace, (int, float)) or not 0 <= pace < math.inf:
            raise ValueError(f"pace must be a number of seconds >= 0, got {pace!r}")
        self.pace = float(pace)
        self._session = session
        self._owns_session = session is None
        self.rng = rng
        self.retries = retries
        self.backoff = backoff
        for name, value in (("max_retry_after", max_retry_after), ("retry_deadline", retry_deadline)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.max_retry_after = float(max_retry_after)
        self.retry_deadline = float(retry_deadline)
        self.timeout = _aiohttp().ClientTimeout(total=timeout)
        self.strict = bool(strict)

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
            # No cookie jar: a cookie one service set (for a parent domain, say) would reach the other.
            self._session = _aiohttp().ClientSession(timeout=self.timeout, cookie_jar=_aiohttp().DummyCookieJar())
        return self._session

    def collection_url(self, collection_id: str) -> str:
        return f"{self.base_url}/collections/{collection_id}"

    async def _request(self, method: str, url: str, limit: int, **kwargs) -> tuple[int, bytes, str]:
        """``(status, body, content type)`` of the first non-retryable answer; raises
        :class:`SubmissionFailed` when the attempts end (every one failed, a ``Retry-After``
        asked more than ``max_retry_after``, or the next wait would pass ``retry_deadline``),
        naming the party and the option that lifts its limit, and :class:`LimitExceeded` for an
        answer longer than ``limit`` bytes (read no further). Each attempt sends the same bytes.
        How long it waits between them follows only the answers (:mod:`participant.retrying`).
        Redirects are not followed: the app configured the one origin it reports to."""
        last, status, asked, named = "no attempt made", None, None, None
        started, attempt, stop = time.monotonic(), 0, ""
        while True:
            try:
                async with self.session.request(method, url, allow_redirects=False, **kwargs) as response:
                    body = await _bounded(response, limit, f"{method} {url}")
                    if response.status < 500 and response.status != 429:
                        return response.status, body, response.content_type
                    typed = response.content_type in (MSGPACK, "application/json")
                    data = self._decode(body, response.content_type) if typed else None
                    last, status = last_answer(response.status, body, data), response.status
                    named = data.get("option") if isinstance(data, dict) else None
                    header = response.headers.get("Retry-After") if status in (429, 503) else None
                    asked = retry_after(header, time.time())
            except (TimeoutError, _aiohttp().ClientError, OSError, ValueError) as exc:
                last, status, asked, named = f"{type(exc).__name__}: {exc}", None, None, None
            attempt += 1
            if attempt > self.retries:
                break
            if asked is not None and asked > self.max_retry_after:
                stop = f"; it asks to wait {asked:g} s, over max_retry_after ({self.max_retry_after:g} s)"
                break
            wait = wait_before(attempt, self.backoff, asked, random.random())
            if time.monotonic() - started + wait > self.retry_deadline:
                stop = f"; another wait would pass retry_deadline ({self.retry_deadline:g} s)"
                break
            await asyncio.sleep(wait)
        who, is_shuffler = party(url, self.shuffler, self.origin)
        lift = option(status, is_shuffler, named)
        verbs = {None: "could not be reached", 429: "refused", 503: "was unavailable"}
        verb = verbs.get(status, "failed")
        raise SubmissionFailed(
            f"{who} {verb}: {method} {url} failed after {attempt} attempts{stop}; last: {last}"
            + (f"; its operator can raise {lift}" if lift and lift not in last else ""),
            url=url, status=status, retry_after=asked, party=who, last=last, option=lift,
        )  # fmt: skip

    @staticmethod
    def _decode(body: bytes, content_type: str):
        try:
            return msgpack.unpackb(body) if content_type == MSGPACK else json.loads(body or b"null")
        except Exception:  # noqa: BLE001 (an answer that is not what it says: report what arrived)
            return {"error": f"unreadable {content_type or 'untyped'} answer of {len(body)} bytes"}

    @staticmethod
    def _refusal(status: int, data) -> ReportRejected:
        message = data.get("error", "") if isinstance(data, dict) else data
        return ReportRejected(status, str(message)[:500])

    async def fetch_collection(self, collection_id: str) -> Published:
        """What the service publishes for the collection: its uid and its spec (checked against
        the app's limits before it is built, then against the published fingerprint)."""
        status, body, ctype = await self._request(
            "GET", self.collection_url(collection_id), self.limits.max_spec_bytes, headers={"Accept": MSGPACK}
        )
        data = self._decode(body, ctype)
        if status != 200:
            raise self._refusal(status, data)
        return Published.from_answer(data, self.limits)

    async def fetch_view(self, collection_id: str) -> ShuffledView:
        """The collection's view as this app's shuffler pinned it (checked: its spec's size against
        the app's limits before it is built, the spec, its fingerprint and its digest); raises
        :class:`SpecError` when the app pins no shuffler."""
        if self.shuffler is None:
            raise SpecError("this app pins no shuffler (shuffler=URL): it reports to no shuffled collection")
        status, data = await self._ask_view(collection_id)
        if status != 200:
            raise self._refusal(status, data)
        return ShuffledView.from_dict(data, self.limits)

    async def _ask_view(self, collection_id: str) -> tuple[int, object]:
        """``(status, decoded answer)`` of the pinned shuffler to ``GET /collections/{id}/view``."""
        status, body, ctype = await self._request(
            "GET", f"{self.shuffler}/collections/{collection_id}/view", self.limits.max_spec_bytes,
            headers={"Accept": "application/json"},
        )  # fmt: skip
        return status, self._decode(body, ctype)

    async def _check_direct(self, collection_id: str) -> None:
        """Return when this app, pinning a shuffler, may report to the unshuffled ``collection_id``
        directly: it names the id in :attr:`direct`, and its shuffler answers 404 or 409 for the
        id's view with the reason ``unknown`` or ``not_shuffled`` (the aggregator told it of no
        shuffled collection of that id; ``too_large``, a shuffled one whose batches do not fit, is
        refused). Raise :class:`SpecError` otherwise, or :class:`SubmissionFailed` when the shuffler
        cannot be reached: an aggregator that shows one device a shuffled collection unshuffled
        would have its report, tied to its address."""
        if collection_id not in self.direct:
            raise SpecError(
                f"collection {collection_id!r} is not shuffled, and this app pins a shuffler: it reports directly only "
                f"to the collections it names (direct={sorted(self.direct)!r}); nothing was sent"
            )
        status, data = await self._ask_view(collection_id)
        reason = data.get("reason") if isinstance(data, dict) else None
        if status == 200:
            raise SpecError(
                f"the shuffler this app pins holds a shuffled view of collection {collection_id!r}, which the "
                "aggregator shows unshuffled; refusing to report directly; nothing was sent"
            )
        if status not in (404, 409) or reason not in ("unknown", "not_shuffled"):
            raise SpecError(
                f"the shuffler this app pins answered {status} ({reason or 'no reason'}) when asked for a view of "
                f"collection {collection_id!r}, so it may be shuffled; refusing to report directly; nothing was sent"
            )

    async def fetch_spec(self, collection_id: str) -> CollectionSpec:
        """The collection's published spec."""
        return (await self.fetch_collection(collection_id)).spec

    async def send_report(self, collection_id: str, body: bytes, shuffler: str | None = None) -> str:
        """POST one packed report, or to ``shuffler`` (its URL) one sealed report; returns
        ``"accepted"`` or ``"duplicate"`` (already stored)."""
        base, ctype = (self.base_url, MSGPACK) if shuffler is None else (shuffler.rstrip("/"), SEALED)
        status, answer, ctype = await self._request(
            "POST",
            f"{base}/collections/{collection_id}/reports",
            self.limits.max_answer_bytes,
            data=body,
            headers={"Content-Type": ctype, "Accept": MSGPACK},
        )
        data = self._decode(answer, ctype)
        accepted = isinstance(data, dict) and data.get("status") in ("accepted", "duplicate")
        if status not in (200, 201) or not accepted:
            raise self._refusal(status, data)
        return data["status"]

    async def submit(
        self,
        collection_id: str,
        record: Mapping[str, object],
        group: int | None = None,
        published: Published | None = None,
        token: str | None = None,
        expected: Mapping[str, Sequence[str]] | None = None,
        shown: Published | None = None,
    ) -> str:
        """Build this person's one report for ``record`` and send it; returns the server's status.

        The spec is fetched first (or taken from ``published``, an earlier
        :meth:`fetch_collection`). The ledger keys the report by this client's origin and
        ``collection_id`` (see :meth:`participant.ledger.Ledger.claim`): a report already drawn is
        re-sent unchanged, a spec equal to one already reported to here gets that same answer at no
        cost, and a fresh draw must fit the app's limits. ``token`` is the enrollment token the
        operator gave this person, for collections that require one.

        Whether a report is sent never depends on ``record``: a value the spec does not declare
        is reported as a value drawn uniformly from the declared ones
        (:func:`~participant.encoding.record_input`). An app that would rather not report to a
        spec lacking values it knows its people hold pins them: ``expected={"age": ["Young",
        ...]}`` refuses (:class:`~participant.errors.SpecError`) a spec whose field ``age`` leaves
        one out, before the record is read.
        ``shown`` is what :meth:`fetch_collection` returned when the person was shown the
        questions: the collection is fetched again, and one that changed since is refused
        (:class:`~participant.errors.SpecError`) before the record is read.

        Raises, sending nothing, a :class:`~participant.errors.ParticipantError`:
        :class:`AlreadyReported` (acknowledged before), :class:`CollectionChanged` (the service
        changed the spec of a collection reported to), :class:`BudgetExceeded` (over the app's
        limits; nothing drawn either), :class:`LimitExceeded` (a spec or answer larger than the
        app's limits, or a shuffled collection's floor or dummies below them), :class:`LedgerError`
        (unreadable or unwritable ledger), :class:`~participant.errors.SpecError` (a spec that
        cannot be read, or lacks an ``expected`` value; an unshuffled collection that an app
        pinning a shuffler does not name in ``direct``, or whose id its shuffler holds a shuffled
        view of) and :class:`~participant.errors.RecordError` (a ``group`` the spec does
        not take, or a record that is not a mapping).
        """
        published = published or await self.fetch_collection(collection_id)
        if shown is not None and (shown.spec.fingerprint, shown.uid) != (published.spec.fingerprint, published.uid):
            raise SpecError(
                f"collection {collection_id!r} changed after its questions were shown; refusing to report (show them again)"
            )
        spec = published.spec
        if expected is not None:
            spec.check_expected(expected)
        seal = shuffler = code = view = None
        if spec.shuffle is not None:  # refused before the record is read: no trusted shuffler, view, key or HPKE
            from .sealing import check_sealable
            from .sealing import seal as sealed_for

            check_sealable(spec)
            self._check_shuffler(collection_id, spec)
            view = await self.fetch_view(collection_id)
            view.check_published(collection_id, published.uid, spec.fingerprint)
            self.limits.check_view(view, collection_id)
            shuffler = self.shuffler
            # The code obtains an anonymous token; nothing that names a person travels inside a
            # sealed report.
            code, token = token, None
            if spec.shuffle.issuer_key is not None:
                from .tokens import issuing_key

                issuing_key(spec.shuffle.issuer_key)  # a key no token could be checked under: refused now
                if code is None:
                    raise SpecError(
                        f"collection {collection_id!r} takes reports only from enrolled people: pass the code you were "
                        "given (token=...); nothing was sent"
                    )

            def seal(body: bytes) -> bytes:
                return sealed_for(body, view)
        elif self.shuffler is not None:  # refused before the record is read: a shuffled collection shown unshuffled
            await self._check_direct(collection_id)
        arrived = _monotonic()
        participant = Participant(spec, rng=self.rng, strict=self.strict)
        participant.validate(record, group)  # nothing drawn yet; strict refuses here, the ledger untouched

        def draw() -> bytes:
            return pack_report(participant.draw(record, group), spec, token)

        if self.ledger is None:
            self.limits.check_collection(spec.epsilon_per_person, collection_id)
            body = draw()
            body = body if seal is None else seal(body)
            await pace_from(arrived, self.pace)  # before the token request too (see below)
            if seal is not None and spec.shuffle.issuer_key is not None:
                body = await self._tokened(collection_id, view, body, code)
            return await self.send_report(collection_id, body, shuffler)
        if self.pace == 0 and _timing_exposed(spec):
            raise LimitExceeded(
                f"collection {collection_id!r} uses {spec.protocol} or a Laplace mean, whose draw time follows its "
                "noise: with pace=0 the moment a report leaves would tell it; set pace > 0; nothing was drawn or sent"
            )
        asked = Asked(
            self.origin, collection_id, published.uid, spec.fingerprint, spec.epsilon_per_person,
            spec.question if seal is None else "",  # a shuffled collection's answer is drawn afresh, never memoised
            None if group is None else int(group),
        )  # fmt: skip
        # The ledger's file lock may wait on another process: off the event loop.
        claim: Claim = await asyncio.to_thread(
            self.ledger.claim, asked, self.limits, draw, lambda old: rewrap(old, spec, token), seal
        )
        if claim.sent:
            raise AlreadyReported(
                f"this device already reported to collection {collection_id!r} at {self.origin}; "
                "a second report would spend epsilon twice"
            )
        outgoing = claim.outgoing
        # Paced before the first request that follows the draw: a token request leaving right after
        # it would tell the issuer the draw's time, which follows the input and noise drawn.
        await pace_from(arrived, self.pace)
        if seal is not None and spec.shuffle.issuer_key is not None:
            outgoing = await self._tokened(collection_id, view, outgoing, code, claim.key)
        status = await self.send_report(collection_id, outgoing, shuffler)
        await asyncio.to_thread(self.ledger.mark_sent, claim.key)
        return status

    async def _tokened(self, collection_id: str, view: ShuffledView, kept: bytes, code: str, key: str | None = None) -> bytes:
        """The sealed report in ``kept`` with its anonymous token behind it (:mod:`participant.tokens`):
        ``kept`` is the sealed report alone, with the token already, or with a request sent before
        and the blind's inverse (a device stopped while its token was issued). The request and the
        inverse, then the token, are written to the ledger under ``key`` before they are used, so
        that a retry asks the issuer the very same request (answered the same) and re-sends the
        very same bytes. Raises :class:`ReportRejected` when the issuer refuses the code, and
        :class:`~participant.blind_rsa.BlindSignatureError` when its answer is not a signature
        under the view's issuing key."""
        from . import tokens
        from .sealing import sealed_length

        length, size = sealed_length(view.spec), tokens.token_length(view) - tokens.INPUT_BYTES
        if len(kept) == length + tokens.token_length(view):
            return kept
        sealed = kept[:length]
        if len(kept) == length + 3 + 2 * size:
            request, inverse = kept[length : length + 3 + size], int.from_bytes(kept[length + 3 + size :], "big")
        else:
            request, inverse = tokens.token_request(view, sealed)
            if key is not None:
                await asyncio.to_thread(self.ledger.reseal, key, sealed + request + inverse.to_bytes(size, "big"))
        response = await self._issue(collection_id, code, request)
        token = tokens.finish(view, sealed, response, inverse)
        if key is not None:
            await asyncio.to_thread(self.ledger.reseal, key, sealed + token)
        return sealed + token

    async def _issue(self, collection_id: str, code: str, request: bytes) -> bytes:
        """The issuer's answer (a blind signature) to the TokenRequest ``request`` with ``code``."""
        body = msgpack.packb({"code": code, "request": request})
        status, answer, ctype = await self._request(
            "POST", f"{self.collection_url(collection_id)}/tokens", self.limits.max_answer_bytes, data=body,
            headers={"Content-Type": MSGPACK, "Accept": MSGPACK},
        )  # fmt: skip
        data = self._decode(answer, ctype)
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("response"), bytes):
            raise self._refusal(status, data)
        return data["response"]

    def _check_shuffler(self, collection_id: str, spec: CollectionSpec) -> None:
        """Raise :class:`SpecError` unless ``spec`` names the shuffler this app pins."""
        if self.shuffler is None:
            raise SpecError(
                f"collection {collection_id!r} is shuffled through {spec.shuffle.url}; this app pins no shuffler "
                "(shuffler=URL), so it reports to none: nothing was sent"
            )
        try:
            named = shuffler_url(spec.shuffle.url)
        except ValueError:  # a URL the spec's shape admits but no device can call: the service's doing
            raise SpecError(f"collection {collection_id!r} names a shuffler no device can call; nothing was sent") from None
        if named != self.shuffler:
            raise SpecError(
                f"collection {collection_id!r} names the shuffler {spec.shuffle.url}; this app trusts {self.shuffler}: "
                "nothing was sent"
            )


def direct_ids(direct: Iterable[str]) -> frozenset[str]:
    """The collection ids an app names in ``direct``; TypeError for one string (an id, not a
    list of them) or for anything but an iterable of strings."""
    if isinstance(direct, (str, bytes)):
        raise TypeError(f"direct must be a list of collection ids, not one string: {direct!r}"[:200])
    try:
        ids = frozenset(direct)
    except TypeError:
        raise TypeError(f"direct must be a list of collection ids, got {direct!r}"[:200]) from None
    if not all(isinstance(i, str) for i in ids):
        raise TypeError("direct must hold collection ids (strings)")
    return ids


def shuffler_url(url: str) -> str:
    """A shuffler's URL as the device compares and calls it: one spelling per address, as the
    ledger writes an origin (:func:`~participant.origin.normalise_origin`); ValueError when it is
    not an http(s) URL."""
    try:
        return normalise_origin(url)
    except ValueError as exc:
        raise ValueError(str(exc).replace("the aggregator's address", "the shuffler's address")) from None


async def _bounded(response: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The body of ``response``, read in a stream and refused (:class:`LimitExceeded`) as soon as
    it passes ``limit`` bytes (after decompression), or when its declared length does."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise LimitExceeded(f"{what} answered {declared} bytes; this app reads at most {limit} (Limits)")
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise LimitExceeded(f"{what} answered more than {limit} bytes; this app reads no more (Limits)")
        chunks.append(chunk)
    return b"".join(chunks)


class Client:
    """A synchronous wrapper of :class:`AsyncClient`, safe to call from several threads and from
    code that already runs an asyncio event loop (each call runs its own loop, on a helper thread
    when the calling thread has one running)."""

    def __init__(self, base_url: str, *, ledger: Ledger | str | os.PathLike | None, **options):
        self.base_url = base_url
        self.ledger = ledger if isinstance(ledger, Ledger) or ledger is None else Ledger(ledger)
        self.options = options
        AsyncClient(base_url, ledger=None, **options)  # refuses bad limits or a bad address now, not at submit

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
        self,
        collection_id: str,
        record: Mapping[str, object],
        group: int | None = None,
        token: str | None = None,
        expected: Mapping[str, Sequence[str]] | None = None,
        shown: Published | None = None,
    ) -> str:
        """:meth:`AsyncClient.submit`, synchronously."""
        return self._run("submit", collection_id, record, group, None, token, expected, shown)
