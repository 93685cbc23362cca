"""Errors the participant library raises; none of them leaves anything sent that the ledger does not know.

Every error a service can cause (by what it publishes, what it answers, or a spec the device
refuses) derives from :class:`ParticipantError`, so an app that catches it stays alive whatever a
service does. ``SpecError`` and ``RecordError`` are also ``ValueError``s, as a spec or record an app
builds itself is an argument error.
"""


class ParticipantError(Exception):
    """The base of every error this library raises on purpose."""


class SpecError(ParticipantError, ValueError):
    """A collection spec is malformed; the message names the offending field."""


class RecordError(ParticipantError, ValueError):
    """A person's record does not fit the collection spec; ``field`` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownFields(UserWarning):
    """A record holds keys its collection's spec does not know (a misspelt field, or a field the
    spec left out). Warned on the device only, never refused: the report is drawn and sent as for
    any record (a field the keys were meant to fill is reported as a value drawn uniformly), so
    nothing the service sees depends on them. Pin field names with ``expected=`` to refuse a spec
    that lacks them before any record is read."""


class UnknownValues(UserWarning):
    """A record's value differs from a value its spec declares only in case (``"young"`` where
    ``"Young"`` is declared): most likely the app's spelling, not the person's answer. Warned on the
    device only, as :class:`UnknownFields`: the report is drawn and sent as for any undeclared value
    (a value drawn uniformly from the declared ones). ``strict=True`` refuses such a record instead."""


class ClientError(ParticipantError):
    """Base of the errors of talking to a service (the client and its ledger)."""


class AlreadyReported(ClientError):
    """This device has already reported to the collection; a second report would spend ε again."""


class CollectionChanged(ClientError):
    """The service now publishes another spec for a collection this device already reported to.
    Nothing is sent: a new report would spend ε again on the same collection."""


class BudgetExceeded(ClientError):
    """The collection asks more ε than the app accepts per collection, or this device's spend over
    the budget's window would pass the app's total. Nothing was drawn or sent."""


class LimitExceeded(ClientError):
    """What a service published or answered is larger than the app's :class:`~participant.Limits`
    allow (spec or answer bytes, a domain, the time a draw would take), or would expose the draw's
    time (``pace=0`` with a mechanism whose time follows its noise). Nothing was drawn or sent."""


class ReportRejected(ClientError):
    """The aggregator refused the request (4xx): retrying would not help. ``status`` and the
    server's message say why."""

    def __init__(self, status: int, message: str):
        super().__init__(f"aggregator answered {status}: {message}")
        self.status = status


class SubmissionFailed(ClientError):
    """A party (the aggregator, or the shuffler the app pins) could not be reached, or kept failing
    or refusing, until the client's attempts ended (``retries``, ``max_retry_after``,
    ``retry_deadline``). The report stays pending in the ledger and is re-sent unchanged by the
    next ``submit``. The message names the party and, for a rate limit, the option that lifts it.

    ``url`` is the address last asked; ``party`` the party it is (``"the shuffler at ORIGIN"``);
    ``status`` the last answer's status (None when no answer came); ``last`` how that answer reads
    (its status and message); ``retry_after`` the seconds its ``Retry-After`` asked to wait (None
    when it asked none), so a caller that sends many reports can pace itself by them; ``option``
    the party's ``serve`` option that lifts the limit a 429 names (None for any other answer)."""

    def __init__(
        self, message: str, *, url: str = "", status: int | None = None, retry_after: float | None = None,
        party: str = "", last: str = "", option: str | None = None,
    ):  # fmt: skip
        super().__init__(message)
        self.url, self.status, self.retry_after = url, status, retry_after
        self.party, self.last, self.option = party, last, option


class LedgerError(ClientError):
    """The ledger file cannot be read or written, or is not a ledger (truncated, garbage, wrong
    types, another program's JSON). Nothing is sent: without a trustworthy ledger the device cannot
    know whether it already reported."""
