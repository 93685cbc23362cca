"""Whether a model learned anything: its accuracy against the constant classifier's, and, when it
is no better, how many people a collection would need for it to be.

Every accuracy the simulator prints stands beside the best constant classifier's on the same test
rows: always answering their most common class, which no constant beats there (the training
split's majority can score less, so that a model without signal would pass it by chance). A model
that does not beat it by more than one standard error of the paired difference (over the repetitions; with one repetition, the binomial error of the test
accuracy) learned nothing a reader should rely on, and the output says so in one line.

**Promises.** When it learned nothing, :func:`people_needed` may add "with about N people it
would". That is a promise about fresh collections, and it is checked as an outside statistician
checked it (issue 80): :data:`CHECK_REPS` fresh collections of N people, judged by the verdict
above (mean paired gain more than one standard error). The rule is derived from that check, not
tuned:

1. *The check.* With ``k`` = :data:`CHECK_REPS` paired gains, normal with mean μ and standard
   deviation σ, the check passes when ``t = mean / SE > 1``; ``t`` follows a noncentral t with
   ``k - 1`` degrees of freedom and noncentrality ``√k·δ``, ``δ = μ / σ`` (the standardized gain
   of a collection of N). It fails with probability ``f(δ) = P(t ≤ 1)``, falling in δ.
   :func:`promise_effect` solves ``f(δ*) =`` :data:`PROMISE_FAILURE` (5 %): δ* ≈ 0.593. A
   promise at an N with ``δ_N ≥ δ*`` fails the check at most 5 % of the time.
2. *The confirmation.* A promise at N is made only when :data:`CONFIRM_REPS` fresh collections at
   N (seeds disjoint from the search's) reject ``δ_N ≤ δ*`` in a one-sided noncentral-t test at
   level :data:`CONFIRM_LEVEL` / 4 (Bonferroni: up to one confirmation per size tried):
   ``t_m > nct.ppf(1 - 0.0125, m - 1, √m·δ*)`` ≈ 5.73 for m = 20, i.e. a mean gain above 1.28
   of its runs' standard deviations. So, whatever the problem, a promise at an N whose check fails
   more than 5 % of the time is made at most 5 % of the times the rule is asked, and any other
   promise fails at most 5 % of the times it is checked. Sharper: below δ* the chance that a
   confirmation passes times the chance the check then fails is at most 0.0006 (at δ ≈ δ*), so
   P(promise made and failed) ≤ 0.05·P(promise made) + 4 × 0.0006: the share of promises that
   fail is at most 5 % plus 0.0024 / P(promise made) (both assuming the simulated collections are
   the population's; a pilot that misrepresents its population is measured, not bounded, in
   ``research/promises.py``).
3. *The search* only chooses where to confirm: at each size, :data:`PEOPLE_REPS` collections, a
   one-sided paired t test of "no gain" at level :data:`SEARCH_LEVEL` / 4 (Bonferroni over the
   four sizes; ``t_9 > 2.685``).

A tie is never a promise, at either step: a mean gain ≤ 0, a standard error that is zero or not
finite, fewer than two runs, or a gain not above its bound by more than float rounding (an outside
check was promised "about 195,993 people" for a file with shuffled labels where nine gains were 0
and one a single test row: the gain equalled its standard error and ``gain > se`` passed by
rounding).

Cost: the search simulates at most 4 × 10 collections and the confirmations at most 4 × 20, so
at most 120 fast-mode collections (was 40); a promise found at the first size that passes both
costs ``10·i + 20`` for the i-th size. A collection of 256 times connect-4's training split (17
million people) takes about two minutes in fast mode on one core.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

# Collections simulated per population size when searching for the people a collection needs,
# and the sizes tried, as multiples of the data set's training split.
PEOPLE_REPS = 10
PEOPLE_FACTORS = (4, 16, 64, 256)
# The check a promise must survive (fresh collections of N people, gain more than one SE) and the
# share of promises allowed to fail it.
CHECK_REPS = 20
PROMISE_FAILURE = 0.05
# Fresh collections confirming a size the search found, and the family-wise levels of the search
# ("no gain") and of the confirmations ("the check fails more than PROMISE_FAILURE of the time"),
# each split over the sizes tried.
CONFIRM_REPS = 20
SEARCH_LEVEL = 0.05
CONFIRM_LEVEL = 0.05
# A gain must exceed its bound by more than this relative margin: float rounding is no evidence.
ROUNDING = 1e-9


@dataclass(frozen=True)
class Verdict:
    """The model's mean accuracy gain over the constant classifier and its standard error."""

    gain: float
    se: float

    @property
    def learned(self) -> bool:
        """Whether the model beats the constant classifier by more than one standard error, and by
        more than float rounding (a gain equal to its SE is a tie, however the sums round)."""
        return self.gain > 0 and self.gain - self.se > ROUNDING * max(abs(self.gain), abs(self.se))


def verdict(accuracy, majority, n_test: int) -> Verdict:
    """The :class:`Verdict` of paired per-repetition accuracies (``accuracy``, ``majority``, equal
    lengths) on test splits of ``n_test`` rows."""
    diff = np.asarray(accuracy, dtype=float) - np.asarray(majority, dtype=float)
    if len(diff) > 1:
        se = float(diff.std(ddof=1) / np.sqrt(len(diff)))
    else:  # one split: the test accuracy's own binomial error
        p = float(np.clip(np.mean(accuracy), 1e-9, 1 - 1e-9))
        se = float(np.sqrt(p * (1 - p) / max(n_test, 1)))
    return Verdict(float(diff.mean()), se)


@cache
def promise_effect(check_reps: int = CHECK_REPS, failure: float = PROMISE_FAILURE) -> float:
    """δ*: the standardized gain (mean over standard deviation of one collection's paired gain) at
    which ``check_reps`` fresh collections fail the one-SE verdict with probability ``failure``."""
    from scipy import optimize, stats

    k = check_reps
    return float(optimize.brentq(lambda d: stats.nct.cdf(1.0, k - 1, np.sqrt(k) * d) - failure, 1e-6, 50.0))


def critical_t(runs: int, level: float, effect: float = 0.0) -> float:
    """The one-sided critical value of ``t = mean / SE`` over ``runs`` paired gains rejecting
    "standardized gain ≤ ``effect``" at ``level`` (Student's t for 0, noncentral t otherwise)."""
    from scipy import stats

    if effect == 0.0:
        return float(stats.t.ppf(1 - level, runs - 1))
    return float(stats.nct.ppf(1 - level, runs - 1, np.sqrt(runs) * effect))


def passes(gains, level: float, effect: float = 0.0) -> bool:
    """Whether paired ``gains`` reject "standardized gain ≤ ``effect``" at ``level``, one-sided. A
    tie never does: fewer than two gains, any not finite, a mean ≤ 0, a standard error that is 0 (or
    rounding's, gains all equal) or not finite, or a mean not above ``critical_t · SE`` by more than float rounding."""
    gains = np.asarray(gains, dtype=float)
    if len(gains) < 2 or not np.isfinite(gains).all():
        return False
    mean = float(gains.mean())
    se = float(gains.std(ddof=1) / np.sqrt(len(gains)))
    if not mean > 0 or not (np.isfinite(se) and se > ROUNDING * mean):  # equal gains: a rounding-sized SE
        return False
    bound = critical_t(len(gains), level, effect) * se
    return mean - bound > ROUNDING * max(abs(mean), abs(bound))


def grown_gains(data, people: int, protocol: str, epsilon, estimator: str, setup, seeds) -> np.ndarray:
    """The paired gains over the constant of collections of ``people`` grown from ``data``, one per
    seed (:func:`~sim.experiment.run_grown`, fast mode)."""
    from .experiment import run_grown

    local = epsilon(people) if callable(epsilon) else epsilon
    dummies = 0
    if hasattr(local, "dummies"):
        local, dummies = local.local, local.dummies
    runs = [run_grown(data, people, protocol, local, s, (estimator,), setup=setup, dummies=dummies) for s in seeds]
    return np.array([r.accuracy[estimator] - r.majority_accuracy for r in runs])


def people_needed(data, protocol: str, epsilon, estimator: str, setup=None, seed: int = 0) -> int | None:
    """The fewest people (among the training split times :data:`PEOPLE_FACTORS`) a collection
    needs to beat the constant classifier, confirmed as the module text derives: at each size, in
    order, :data:`PEOPLE_REPS` collections (seeds ``seed`` to ``seed + 9``) must reject "no gain";
    then :data:`CONFIRM_REPS` fresh ones at that size (seeds from ``seed + 10``) must show it
    beats the constant on a fresh check with at least 95 % chance, or the search goes on to the
    next size. None when no size passes both (more people do not help at this ε, not within 256
    times the data, or not demonstrably). Each collection splits ``data`` 80/20 as ``sim plan``
    does, draws the people with replacement from its training rows alone and scores on its test
    rows (:func:`~sim.experiment.run_grown`): a dependence the sample holds by chance is not one the
    people have. ``epsilon`` is each person's ε, or a function of the number of people giving it,
    or giving how they are shuffled (a :class:`~sim.cli_options.Shuffled`: a larger collection
    reports at a larger local ε, with more dummies)."""
    looks = len(PEOPLE_FACTORS)
    search = range(seed, seed + PEOPLE_REPS)
    fresh = range(seed + PEOPLE_REPS, seed + PEOPLE_REPS + CONFIRM_REPS)
    for factor in PEOPLE_FACTORS:
        people = int(len(data.y) * 0.8 * factor)
        if not passes(grown_gains(data, people, protocol, epsilon, estimator, setup, search), SEARCH_LEVEL / looks):
            continue
        if passes(
            grown_gains(data, people, protocol, epsilon, estimator, setup, fresh),
            CONFIRM_LEVEL / looks,
            promise_effect(),
        ):
            return people
    return None


def describe(found: Verdict, needed: int | None = None, searched: bool = False) -> str | None:
    """The one line saying the model learned nothing, or None when it did."""
    if found.learned:
        return None
    line = (
        f"  the model does not beat the best constant classifier on the test rows ({found.gain:+.4f} ± {found.se:.4f}): "
        "it learned nothing to rely on"
    )
    if searched:
        if needed is None:
            line += f"; more people were not shown to help at this epsilon (none confirmed up to {PEOPLE_FACTORS[-1]}x)"
        else:
            line += f"; with about {needed:,} people it would (python -m sim plan simulates such collections)"
    return line
