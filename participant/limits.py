"""What the app lets one device spend and do: limits that no service can raise.

:class:`Limits` bounds the privacy a device spends (ε per collection, a :class:`Budget` for the
whole device) and the resources a service can make it use: the bytes it reads, the domain a spec
may declare, the time a draw may take. Every limit is checked on what the service published
before anything is drawn, and a spec over a limit is refused with :class:`LimitExceeded`. For a
shuffled collection the device also decides the amplification it needs: the batch floor and the
dummies the shuffler's view holds to, at least the app's (:meth:`Limits.check_view`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocols.shuffling import DUMMY_SHARE

from .errors import BudgetExceeded, LimitExceeded, SpecError

if TYPE_CHECKING:
    from .view import ShuffledView

# Seconds one unit of a draw's work takes on a slow device: bench/device.py measures them on the
# development machine (one exact discrete Laplace sample 23 µs, one 64-bit coin word 14 ns, on
# 2026-11-27), and these are about four times that, for a phone. They estimate a draw's time
# before it is drawn, so that a spec whose draw would take too long is refused without drawing.
SECONDS_PER_NOISE = 1e-4
SECONDS_PER_COIN = 6e-8
# What a draw of constant work (an index: DE, the one-bit mean) is estimated at, whatever its domain.
SECONDS_PER_INDEX = 1e-4

# How each mechanism's work grows with its domain: noise (one exact Laplace sample per entry:
# SHE, THE, the Laplace mean), coins (a word per entry: SUE, OUE, and ``auto``, which may pick
# OUE) or index (constant: DE, the one-bit mean).
WORK_OF_PROTOCOL = {"DE": "index", "SUE": "coins", "OUE": "coins", "auto": "coins", "SHE": "noise", "THE": "noise"}
SECONDS_PER = {"noise": SECONDS_PER_NOISE, "coins": SECONDS_PER_COIN, "index": 0.0}
# The window of Budget.yearly, in days, and its default as a multiple of Budget.total: three
# months' worth of the rolling total in any year (24 ε at the default 8).
YEAR_DAYS = 365.0
YEARLY_SHARE = 3.0


def _positive(value, name: str, integer: bool = False) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not 0 < value < math.inf:
        kind = "integer" if integer else "number"
        raise ValueError(f"{name} must be a positive finite {kind}, got {value!r}")


@dataclass(frozen=True)
class Budget:
    """The most ε (``total``) this device spends on fresh draws within any ``per_days`` days, and
    the most (``yearly``) within any 365 days, at every service together (one ledger is one device).

    The rolling window alone would let a device spend ``total`` afresh every ``per_days`` days
    (about 97 ε a year at the defaults); ``yearly`` is the ceiling over time: at the defaults, 24 ε
    in any year (2 a month on average, a burst of 8 within one month), so at most 240 ε in any ten
    years. Unset, ``yearly`` is ``YEARLY_SHARE`` times ``total``, so an app that raises its total
    raises its ceiling in proportion. A repeated question answered from the memo costs nothing
    under either."""

    total: float = 8.0
    per_days: float = 30.0
    yearly: float | None = None

    def __post_init__(self):
        if self.yearly is None and isinstance(self.total, (int, float)) and not isinstance(self.total, bool):
            object.__setattr__(self, "yearly", YEARLY_SHARE * self.total)
        for name in ("total", "per_days", "yearly"):
            _positive(getattr(self, name), f"Budget.{name}")

    @property
    def kept_days(self) -> float:
        """The days an entry's spend counts toward some window: the longer of the two."""
        return max(self.per_days, YEAR_DAYS)


def _count(value, what: str) -> int:
    """``len(value)`` of a list a spec declares, refusing anything else."""
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{what} must be a list")
    return len(value)


def declared_inputs(data: Any) -> list[tuple[str, int]]:
    """``(work, entries)`` of every input a raw spec mapping declares, counted from the mapping
    alone (nothing is built, so a huge declaration costs nothing to count): ``entries`` is the
    input's domain (what its report carries) and ``work`` how its draw's time grows with it (see
    :data:`WORK_OF_PROTOCOL`). Raises :class:`SpecError` when the mapping's shape cannot be counted."""
    if not isinstance(data, dict):
        raise SpecError("a spec must be a mapping")
    k = _count(data.get("classes"), "classes")
    protocol = data.get("protocol")
    work = WORK_OF_PROTOCOL.get(protocol, "coins") if isinstance(protocol, str) else "coins"
    inputs = [(work, k)]
    continuous = data.get("continuous")
    if continuous is None:
        features = data.get("features") or []
        _count(features, "features")
        for feature in features:
            categories = feature.get("categories") if isinstance(feature, dict) else None
            inputs.append((work, _count(categories, "every feature's categories") * k))
        return inputs
    if not isinstance(continuous, dict):
        raise SpecError("continuous must be a mapping")
    projection = continuous.get("projection")
    outputs = projection.get("outputs") if isinstance(projection, dict) else continuous.get("inputs")
    r = _count(outputs, "the continuous outputs")
    if data.get("model", "discrete") != "gaussian":
        bins = continuous.get("bins")
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise SpecError("a discrete model of continuous features needs bins (an integer)")
        return inputs + [(work, bins * k)] * r
    approach = data.get("approach", 3)
    if approach == 3:
        return inputs + [("noise", k)] * (2 * r)
    return inputs + [("noise" if approach == 1 else "index", r * k)] * 2


@dataclass(frozen=True)
class Limits:
    """What the app lets one device spend and do; a service can raise none of it, and the defaults
    hold for an app that never sets them.

    - ``max_epsilon``: the most ε one collection may cost (a collection asking more is refused);
    - ``budget``: the most ε all fresh draws on this device cost within a window of days, and
      within any year (:class:`Budget`);
    - ``max_spec_bytes`` and ``max_answer_bytes``: the largest collection description, and any
      other answer, the device reads (bytes; read in a bounded stream, refused beyond);
    - ``max_domain`` and ``max_total_domain``: the most entries one input's report may carry, and
      all inputs of a spec together;
    - ``max_draw_seconds``: the longest a draw may be estimated to take on a slow device
      (:data:`SECONDS_PER_NOISE`, :data:`SECONDS_PER_COIN`);
    - ``max_collections``: the most collections the device holds at one origin drawn within the
      budget's window or never acknowledged (whatever their age), memoised answers included (they
      cost no ε, but each is an entry its ledger keeps). Counted per origin, so that no service
      can shut a device out of another (the app chooses its origins). It bounds the ledger, per
      origin the app reports to, at about twice as many entries plus the memo's (the window's and
      pending ones, as many on the day before the window, and ``max_memo_per_origin``) and the
      markers of a year's entries that left, and a submit reads and checks every entry: at the
      slowest device measured (a page's IndexedDB, about 55 µs an entry,
      ``bench/results/device.md``) 300 keeps a submit's ledger work near 50 ms for an app
      reporting to one origin; 300 in 30 days is ten a day, more than the default budget pays for
      at any ε above 0.027;
    - ``memo_days``: the longest the memo keeps a question's answer after it was last given (days):
      a question not asked for that long is answered afresh, its ε counted, and its entry leaves
      the ledger, so a service asking a new question every day leaves at most this many entries;
    - ``max_memo_per_origin``: the most questions whose answers the memo keeps at one origin
      (none is kept for all origins together: one origin's questions never evict another's
      answers): past it, the answers given longest ago are given up first (their reports leave the ledger; the question, asked again, is drawn afresh,
      its ε counted), so that no service asking ever more questions grows the ledger. Their spend
      still counts. 100 is a hundred distinct questions at one service, each asked within the
      year: more than a service asking the same few questions on a schedule ever uses, and few
      enough that a submit's ledger work stays within 50 ms however many a service asks;
    - ``min_batch`` and ``min_dummy_share``: the amplification a shuffled collection must give, or
      it is refused: its shuffler's view must hold every batch to at least ``min_batch`` people's
      reports and add at least ``min_dummy_share`` times that floor in dummies (rounded up). The
      defaults are those a person would want: the shuffler's own default floor of 100, and as many
      dummies as the floor, the project's default share (:data:`protocols.shuffling.DUMMY_SHARE`):
      at the default ``max_epsilon`` 2 a batch of 100 people and 100 dummies is (0.76, 1e-3)-DP
      against the aggregator alone and (1.27, 1e-3)-DP against one that floods the batch; at a
      floor of 10 it would be 1.96 and 1.98, hardly amplified.
    """

    max_epsilon: float = 2.0
    budget: Budget = Budget()
    max_spec_bytes: int = 256 * 1024
    max_answer_bytes: int = 64 * 1024
    max_domain: int = 65_536
    max_total_domain: int = 1_048_576
    max_draw_seconds: float = 1.0
    max_collections: int = 300
    memo_days: float = 365.0
    max_memo_per_origin: int = 100
    min_batch: int = 100
    min_dummy_share: float = DUMMY_SHARE

    def __post_init__(self):
        _positive(self.max_epsilon, "max_epsilon")
        if not isinstance(self.budget, Budget):
            raise ValueError(f"budget must be a Budget, got {self.budget!r}")
        for name in ("max_spec_bytes", "max_answer_bytes", "max_domain", "max_total_domain", "max_collections",
                     "max_memo_per_origin"):
            _positive(getattr(self, name), name, integer=True)
        _positive(self.max_draw_seconds, "max_draw_seconds")
        _positive(self.memo_days, "memo_days")
        _positive(self.min_batch, "min_batch", integer=True)
        share = self.min_dummy_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < math.inf:
            raise ValueError(f"min_dummy_share must be a finite number >= 0, got {share!r}")

    def check_collection(self, epsilon: float, collection: str) -> None:
        """Raise :class:`BudgetExceeded` when a collection's ``epsilon`` is above :attr:`max_epsilon`."""
        if epsilon > self.max_epsilon:
            raise BudgetExceeded(
                f"collection {collection!r} asks epsilon={epsilon:g}; this app accepts at most "
                f"{self.max_epsilon:g} per collection; nothing was drawn or sent"
            )

    def check_view(self, view: ShuffledView, collection: str) -> None:
        """Raise :class:`LimitExceeded` unless the shuffler's ``view`` holds batches to at least
        :attr:`min_batch` people and adds at least ``ceil(min_dummy_share * view.min_batch)`` dummies."""
        dummies = math.ceil(self.min_dummy_share * view.min_batch)
        if view.min_batch < self.min_batch or view.dummies < dummies:
            raise LimitExceeded(
                f"collection {collection!r} is shuffled in batches of {view.min_batch} people and {view.dummies} "
                f"dummies; this app needs at least {self.min_batch} people (Limits.min_batch) and {dummies} dummies, "
                f"{self.min_dummy_share:g} times the floor (Limits.min_dummy_share); nothing was drawn or sent"
            )

    def check_spec(self, data: Any, collection: str) -> None:
        """Raise :class:`LimitExceeded` when the raw spec mapping ``data`` declares an input's
        domain, or all inputs' together, above the limits, or a draw estimated to take longer
        than :attr:`max_draw_seconds`. Counts only: runs in microseconds whatever the spec declares."""
        inputs = declared_inputs(data)
        refusal = f"collection {collection!r} asks"
        largest = max(entries for _, entries in inputs)
        if largest > self.max_domain:
            raise LimitExceeded(
                f"{refusal} an input of {largest} entries; this app accepts at most {self.max_domain} "
                "(Limits.max_domain); nothing was drawn or sent"
            )
        total = sum(entries for _, entries in inputs)
        if total > self.max_total_domain:
            raise LimitExceeded(
                f"{refusal} {total} entries over its {len(inputs)} inputs; this app accepts at most "
                f"{self.max_total_domain} (Limits.max_total_domain); nothing was drawn or sent"
            )
        seconds = max(draw_seconds(work, entries) for work, entries in inputs)
        if seconds > self.max_draw_seconds:
            raise LimitExceeded(
                f"{refusal} a draw estimated at {seconds:.3g} s on a slow device; this app accepts at most "
                f"{self.max_draw_seconds:g} s (Limits.max_draw_seconds); nothing was drawn or sent"
            )


def draw_seconds(work: str, entries: int) -> float:
    """The estimated seconds a slow device takes to draw one report of ``entries`` entries whose
    ``work`` is ``"noise"``, ``"coins"`` or ``"index"``."""
    return SECONDS_PER_INDEX + SECONDS_PER[work] * entries
