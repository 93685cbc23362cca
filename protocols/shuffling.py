"""Privacy amplification by shuffling: what ``n`` anonymous ε₀-LDP reports are worth against the aggregator.

When ``n`` people each send one report drawn by an ε₀-LDP randomiser and the aggregator receives
them shuffled, with nothing that ties a report to its sender, what it sees is (ε, δ)-DP with ε far
below ε₀. The bound here is the numerical one of Feldman, McMillan and Talwar, *Hiding Among the
Clones: A Simple and Nearly Optimal Analysis of Privacy Amplification by Shuffling* (FOCS 2021,
arXiv 2012.12803, Theorem 3.2 and Appendix E): every ε₀-LDP randomiser on the other ``n − 1``
people's data is a mixture that, with probability ``e^{-ε₀}``, produces a "clone" of the first
person's report (on one of two neighbouring records, each half the time), so the shuffled output
is post-processing of the pair

    P = (A + Δ, C − A + 1 − Δ),   Q = (A + 1 − Δ, C − A + Δ),
    C ~ Bin(n − 1, e^{-ε₀}),  A ~ Bin(C, 1/2),  Δ ~ Bernoulli(e^{ε₀} / (e^{ε₀} + 1)),

and the release is (ε, δ)-DP for every δ at least the hockey-stick divergence of P from Q. Given
``C = c`` the ratio P/Q grows with the first coordinate, so the divergence is a binomial tail,
computed for every ``c`` at once with scipy; the values of ``C`` outside a window holding all but
``δ / 10^4`` of its mass are counted as if they lost everything (their mass added to δ). The
result is an upper bound on the shuffled ε to within the bisection's 10^-5 relative step, the
closed form of Theorem 3.1 beside it (:func:`closed_form_epsilon`). A report of this library
(its input chosen independently of the data, randomised with the collection's ε) is one ε₀-LDP
randomiser of the whole record, so the bound applies to a whole collection.

What the bound assumes: the shuffler does not collude with the aggregator, and the other
``n − 1`` reports of a batch are drawn independently of the person's, each by an ε₀-LDP
randomiser on some record. People's reports are; an aggregator that floods a batch with its own
reports, so that one person's is the only other one, makes that false for them. The shuffler's
dummy reports (``participant.dummies``) are drawn by the collection's randomiser whatever anyone
sends, so a batch of ``K`` people's reports and ``M`` dummies gives two guarantees
(:func:`guarantees`): the bound for ``K + M`` reports when the others are people, and for
``M + 1`` (the person's among the dummies alone) when the aggregator wrote every other report;
without dummies, ε₀, which every report keeps in any case.

Needs scipy (the aggregator's and the simulator's install), imported where a bound is computed; the
device imports only :data:`DUMMY_SHARE`, the dummies its limits ask by default (numpy alone is
loaded at module level).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Mass of C left out of the sum, relative to the δ asked for; added to δ, so that the bound holds.
TAIL = 1e-4
# Bisection: at most this many steps, ending when the interval is this small relative to its end.
_STEPS, _RESOLUTION = 40, 1e-5


def default_delta(people: int) -> float:
    """The δ a collection of ``people`` states when none is given: ``1 / (10·people)``, below the
    ``1/n`` at which an (ε, δ) release could publish one person's record outright."""
    return 1.0 / (10.0 * max(int(people), 1))


def _check(local_epsilon: float, people: int, delta: float) -> None:
    if not (math.isfinite(local_epsilon) and local_epsilon > 0):
        raise ValueError(f"the local epsilon must be a positive number, got {local_epsilon!r}")
    if isinstance(people, bool) or int(people) != people or people < 1:
        raise ValueError(f"the number of people must be a positive integer, got {people!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


# The values of C are summed in at most this many intervals: over each, the divergence given C = c
# is monotone in c, so its larger end bounds it (Appendix E's stepping; tested against every c).
INTERVALS = 512


@lru_cache(maxsize=256)
def _clones(local_epsilon: float, people: int, delta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The ends ``c`` of the intervals C ~ Bin(n − 1, e^{-ε₀}) is summed over (all but ``TAIL · δ``
    of its mass), each interval's probability, and the mass left out."""
    from scipy import stats

    law = stats.binom(people - 1, math.exp(-local_epsilon))
    low = max(int(law.ppf(TAIL * delta / 2)) - 1, 0)
    high = min(int(law.isf(TAIL * delta / 2)) + 1, people - 1)
    step = max(1, -(-(high - low) // INTERVALS))
    ends = np.arange(low, high + step, step)
    ends[-1] = min(ends[-1], people - 1)
    # Interval i holds c from ends[i] to ends[i + 1] - 1; the last, ends[-1] alone.
    below = law.cdf(ends - 1)
    mass = np.diff(np.append(below, law.cdf(ends[-1])))
    return ends, mass, max(0.0, 1.0 - float(mass.sum()))


def _at_least(k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """P[Bin(c, 1/2) >= k], elementwise."""
    from scipy.special import bdtrc

    inside = (k >= 1) & (k <= c)
    tail = bdtrc(np.where(inside, k - 1, 0), c, 0.5)
    return np.where(k <= 0, 1.0, np.where(k > c, 0.0, tail))


def shuffled_delta(epsilon: float, local_epsilon: float, people: int, delta: float = 1e-6) -> float:
    """The smallest δ (an upper bound on it) for which ``people`` shuffled ε₀-LDP reports are
    (ε, δ)-DP, ε = ``epsilon``; ``delta`` only sets how much of C's tail may be left out."""
    if epsilon >= local_epsilon:
        return 0.0
    c, mass, left_out = _clones(local_epsilon, people, delta)
    e0, e = math.exp(local_epsilon), math.exp(epsilon)
    # P > e^ε Q where P's first coordinate a = A + Δ has a/(c − a + 1) > R, that is a > x with
    # x = (c + 1)·R/(1 + R), strictly between 0 and c + 1 (float rounding may reach c + 1).
    ratio = math.expm1(epsilon + local_epsilon) / (e0 - e)
    t = np.minimum(np.floor((c + 1) * (ratio / (1.0 + ratio))) + 1, c + 1)
    # (1 − h − e^ε h) and (h − e^ε (1 − h)) with h = e^ε₀/(e^ε₀ + 1), written without cancelling.
    excess = np.maximum(((1.0 - e * e0) * _at_least(t, c) + (e0 - e) * _at_least(t - 1, c)) / (e0 + 1.0), 0.0)
    # Interval i runs from c[i] to c[i + 1] - 1: bounded by the larger divergence at its ends.
    bound = np.maximum(excess, np.append(excess[1:], excess[-1])) if len(c) > 1 else excess
    return float(np.dot(mass, bound)) + left_out


@lru_cache(maxsize=1024)
def shuffled_epsilon(local_epsilon: float, people: int, delta: float) -> float:
    """The central ε (an upper bound) of ``people`` shuffled reports each ``local_epsilon``-LDP, at
    ``delta``: the smallest ε whose :func:`shuffled_delta` is at most ``delta``. Never above
    ``local_epsilon`` (shuffling never costs privacy); ``local_epsilon`` itself for one report
    (at a δ of its own a lone ε₀-LDP report is also (ε, δ)-DP for a smaller ε, but not by shuffling)."""
    _check(local_epsilon, people, delta)
    if people < 2:  # one report is shuffled with nothing: what it keeps is its own ε
        return float(local_epsilon)
    low, high = 0.0, float(local_epsilon)
    closed = closed_form_epsilon(local_epsilon, people, delta)
    if closed is not None and closed < high:
        high = closed
    if shuffled_delta(high, local_epsilon, people, delta) > delta:  # cannot happen for a valid closed form
        high = float(local_epsilon)
    _, high = _bisect(low, high, lambda middle: shuffled_delta(middle, local_epsilon, people, delta) <= delta)
    return high


def closed_form_epsilon(local_epsilon: float, people: int, delta: float) -> float | None:
    """Theorem 3.1's closed form, or None outside where it holds (ε₀ > log(n / (16 log(4/δ))))."""
    _check(local_epsilon, people, delta)
    if local_epsilon > math.log(people / (16.0 * math.log(4.0 / delta))):
        return None
    e0 = math.exp(local_epsilon)
    a = 8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(people)
    c = 8.0 * e0 / people
    spread = math.log1p(a + c)
    return math.log1p((1.0 - 1.0 / e0) / (1.0 + math.exp(-local_epsilon - spread)) * (a + c))


@lru_cache(maxsize=1024)
def largest_local_epsilon(central_epsilon: float, people: int, delta: float, ceiling: float = 50.0) -> float:
    """The largest ε₀ (at most ``ceiling``) whose ``people`` shuffled reports are
    (``central_epsilon``, ``delta``)-DP by :func:`shuffled_delta`; at least ``central_epsilon``
    itself. Returns a value whose shuffled ε, as :func:`shuffled_epsilon` states it, is within the
    target (it errs low, by a few 10^-5 relative)."""
    _check(central_epsilon, people, delta)
    if people < 2:  # nothing to shuffle with: see shuffled_epsilon
        return float(central_epsilon)
    low, high = float(central_epsilon), float(max(ceiling, central_epsilon))
    if shuffled_delta(central_epsilon, high, people, delta) <= delta:
        return high
    low, _ = _bisect(low, high, lambda middle: shuffled_delta(central_epsilon, middle, people, delta) > delta)
    # shuffled_epsilon states a bound that errs high by up to its own resolution: step down until
    # the central ε it states for this ε₀ is within the target too.
    while low > central_epsilon and shuffled_epsilon(low, people, delta) > central_epsilon:
        low = max(float(central_epsilon), low * (1 - _RESOLUTION))
    return low


def _bisect(low: float, high: float, high_side) -> tuple[float, float]:
    """``[low, high]`` narrowed to within :data:`_RESOLUTION` (relative) around where
    ``high_side(x)`` turns true: it is false at ``low``'s side and true at ``high``'s."""
    for _ in range(_STEPS):
        middle = (low + high) / 2
        if high - low <= _RESOLUTION * high:
            break
        if high_side(middle):
            high = middle
        else:
            low = middle
    return low, high


#: The dummies a shuffled collection's shuffler adds to every batch when its operator names no
#: number: this share of the batch floor. Chosen in ``research/results/dummies.md`` on the fourteen
#: problems, for the local ε that meets a central ε whatever the aggregator sends the shuffler,
#: leaving one data set out: 12 of the 14 folds chose as many dummies as people (shares 0 to 8 tried).
DUMMY_SHARE = 1.0


def default_dummies(min_batch: int) -> int:
    """The dummies per batch a collection of batch floor ``min_batch`` gets by default."""
    return int(math.ceil(DUMMY_SHARE * min_batch))


def flooded_epsilon(local_epsilon: float, dummies: int, delta: float) -> float:
    """The central ε against an aggregator that writes every other report of a person's batch: the
    person's report among the shuffler's ``dummies`` alone (``local_epsilon`` without any)."""
    if dummies < 1:
        return float(local_epsilon)
    return shuffled_epsilon(local_epsilon, dummies + 1, delta)


def guarantees(local_epsilon: float, min_batch: int, dummies: int, delta: float) -> dict:
    """What a person reporting at ``local_epsilon`` through a shuffler has against the aggregator
    alone, at ``delta``, in batches of at least ``min_batch`` people's reports and ``dummies``
    dummies: ``{"people": ε when the batch's others are people, "flooded": ε when the aggregator
    wrote them all, "amplified": whether flooded is below the local ε}``."""
    people = shuffled_epsilon(local_epsilon, min_batch + dummies, delta)
    flooded = flooded_epsilon(local_epsilon, dummies, delta)
    return {"people": people, "flooded": flooded, "amplified": flooded < local_epsilon * (1 - 1e-4)}


def local_epsilon_for(
    central: float, min_batch: int, dummies: int, delta: float, flooded: float | None = None, ceiling: float = 50.0
) -> float:
    """The largest local ε whose shuffled reports, in batches of ``min_batch`` people's and
    ``dummies`` dummy reports, are within ``central`` when the batch's others are people and, given
    ``flooded``, within it against an aggregator that wrote them all (the person's report among the
    dummies alone; without dummies, ``flooded`` itself)."""
    local = largest_local_epsilon(central, min_batch + dummies, delta, ceiling)
    if flooded is not None:
        worst = flooded if dummies < 1 else largest_local_epsilon(flooded, dummies + 1, delta, ceiling)
        local = min(local, worst)
    return min(local, ceiling)
