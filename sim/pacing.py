"""A replay's participants pacing themselves by the ``Retry-After`` of the party they send to.

A trial run sends every report from one machine, so it meets limits a real collection's people,
each on their own address, never do: the shuffler takes 600 reports a minute from one address by
default (``python -m shuffler serve --per-address``), the aggregator as many as its
``--rate-limit`` says. Refused 429 or 503 with a ``Retry-After``, every participant of the replay
waits that long together (a sleep, never a loop of retries), for at most :data:`PATIENCE` seconds
in all; then, or when one answer asks more than is left, the replay stops with a message naming
the party (by URL) and the option that lets the run through.
"""

from __future__ import annotations

import asyncio
import sys
import time

from tqdm import tqdm

from participant.errors import ClientError, ReportRejected, SubmissionFailed

PATIENCE = 600.0  # seconds a replay may spend paused, in all
NETWORK_RETRIES = 5  # attempts of one report the network (or an answer without Retry-After) may fail
BACKOFF = 0.2  # seconds before the first of those retries, doubled each time


class Refused(Exception):
    """The party a replay sends to refused it for good; the message (one line) names the party by
    URL and what would let the run through."""


def party(url: str, shuffler: bool) -> str:
    """``"the shuffler at URL"`` or ``"the aggregator at URL"``."""
    return f"the {'shuffler' if shuffler else 'aggregator'} at {url}"


def remedy(status: int, message: str, shuffler: bool, reports: int) -> str:
    """The command-line option of the refusing party's ``serve`` that lifts the limit its 429
    ``message`` names, for a replay of ``reports`` reports from one address (for a 503: to try
    again later)."""
    if status != 429:
        return "it stayed unavailable; try again later"
    if not shuffler:
        return (
            "its operator lets a trial run from one machine through with "
            f"python -m aggregator serve --rate-limit {reports} (0: no limit)"
        )
    if "wait for a batch" in message:
        return f"its operator raises what may wait with python -m shuffler serve --max-waiting N (N >= {reports})"
    if "a second" in message:
        return "its operator raises python -m shuffler serve --per-collection N (0: no limit)"
    return (
        f"its operator lets a trial run from one machine through with python -m shuffler serve --per-address {reports} "
        "(reports a minute from one address; 0: no limit)"
    )


class Pacer:
    """The pauses of one replay of ``reports`` reports to ``url`` (a shuffler's when ``shuffler``)."""

    def __init__(self, url: str, shuffler: bool, reports: int, patience: float | None = None, clock=time.monotonic):
        self.url, self.shuffler, self.reports = url, shuffler, reports
        self.patience = PATIENCE if patience is None else patience
        self.clock = clock
        self.resume_at = 0.0  # no participant sends before
        self.paused = 0.0  # seconds paused so far, in all
        self.told = False

    async def ready(self) -> None:
        """Return once no pause is running (sleeps through the one that is)."""
        while (left := self.resume_at - self.clock()) > 0:
            await asyncio.sleep(left)

    def refused(self, exc: SubmissionFailed, attempt: int) -> float:
        """After ``exc`` ended the ``attempt``-th try (from 1) of one report: the seconds that report
        waits before its next try (the whole replay pauses too when the answer asked to wait).
        Raises :class:`Refused` when the replay should stop."""
        if exc.status in (429, 503) and exc.retry_after is not None:
            return self._pause(exc, exc.retry_after)
        if attempt >= NETWORK_RETRIES:
            raise Refused(str(exc) if exc.party else f"{party(self.url, self.shuffler)} could not be used: {exc}") from None
        return BACKOFF * 2 ** (attempt - 1)

    def _pause(self, exc: SubmissionFailed, seconds: float) -> float:
        seconds = max(seconds, 0.1)
        why = exc.last or exc.args[0].rpartition("last: ")[2]
        left = self.patience - self.paused
        if seconds > left:
            waited = f" after pausing {self.paused:.0f} s as it asked" if self.paused else ""
            raise Refused(
                f"{party(self.url, self.shuffler)} kept refusing this replay's reports{waited} "
                f"(last: {why}; it asks {seconds:g} s more): {remedy(exc.status, why, self.shuffler, self.reports)}"
            ) from None
        now = self.clock()
        until = now + seconds
        if until > self.resume_at:
            self.paused += until - max(now, self.resume_at)
            self.resume_at = until
        if not self.told:
            self.told = True
            tqdm.write(
                f"{party(self.url, self.shuffler)} refused a report ({why}); pacing by its Retry-After, "
                f"at most {self.patience:g} s in all: {remedy(exc.status, why, self.shuffler, self.reports)}",
                file=sys.stderr,
            )
        return 0.0


async def send_paced(participant, collection_id: str, body: bytes, shuffler: str | None, pacer: Pacer) -> str:
    """Send one report through ``participant`` (an :class:`~participant.client.AsyncClient` that
    does not retry), trying again as ``pacer`` says; returns the party's status (``accepted`` or
    ``duplicate``: a retry of a report that arrived). Raises :class:`Refused` when the party
    refuses it for good (a 4xx, or the pacer gives up)."""
    attempt = 0
    while True:
        await pacer.ready()
        attempt += 1
        try:
            return await participant.send_report(collection_id, body, shuffler)
        except SubmissionFailed as exc:
            wait = pacer.refused(exc, attempt)
        except ReportRejected as exc:  # a 4xx: retrying would not help
            why = str(exc).partition(": ")[2]
            raise Refused(f"{party(pacer.url, pacer.shuffler)} refused a report ({exc.status}): {why}") from None
        except ClientError as exc:
            raise Refused(f"{party(pacer.url, pacer.shuffler)} could not be used: {exc}") from None
        if wait:
            await asyncio.sleep(wait)
