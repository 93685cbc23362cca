"""Empirical privacy audit: a statistical lower bound on a mechanism's ε from its samples.

Draw ``n`` reports for each of two neighbouring inputs, map every report to one of a few events
(post-processing, so any event set gives a valid bound), and for each event and direction take a
Clopper-Pearson lower bound on one probability over an upper bound on the other. The largest
log-ratio is, with confidence ``1 - alpha`` (Bonferroni over the four one-sided bounds of every event), a lower bound on the
mechanism's true ε. A correct mechanism yields a bound below its stated ε; one that spends more
(a wrong probability, a missing factor in the noise scale) is caught once the bound passes ε.

The events are chosen where the privacy loss is largest: the two coordinates in which the inputs
differ, and for noisy real values the tails beyond them (where the Laplace ratio is exactly e^ε).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from .base import Mechanism
from .histogram import _HistogramPerturbation
from .mean import LaplaceMean, OneBitMean
from .unary import UnaryEncoding


@dataclass(frozen=True)
class AuditResult:
    """``epsilon_lower_bound``: the audited bound; ``event``: the event index that gave it."""

    epsilon_lower_bound: float
    event: int
    samples: int


def _events(mechanism: Mechanism, reports: np.ndarray, a, b) -> np.ndarray:
    """Event index of each report, for neighbouring inputs ``a`` and ``b``."""
    if isinstance(mechanism, UnaryEncoding):
        return reports[:, a].astype(int) * 2 + reports[:, b].astype(int)
    if isinstance(mechanism, _HistogramPerturbation):
        buckets = lambda x: np.digitize(x, [0.0, 1.0])  # noqa: E731  (-inf, 0), [0, 1), [1, inf)
        return buckets(reports[:, a]) * 3 + buckets(reports[:, b])
    if isinstance(mechanism, LaplaceMean):
        # Inputs differ in coordinate j (a and b are vectors); the tails beyond ±1.
        j = int(np.argmax(np.abs(np.asarray(a) - np.asarray(b))))
        return np.digitize(reports[:, j], [-1.0, 1.0])
    if isinstance(mechanism, OneBitMean):
        return np.asarray(reports, dtype=np.int64)
    return np.asarray(reports, dtype=np.int64)  # DE: the reported value


def _inputs(mechanism: Mechanism, a, b, n: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(mechanism, (LaplaceMean, OneBitMean)):
        return np.tile(np.asarray(a, dtype=float), (n, 1)), np.tile(np.asarray(b, dtype=float), (n, 1))
    return np.full(n, a), np.full(n, b)


def audit(mechanism: Mechanism, a, b, n: int, rng, alpha: float = 1e-3) -> AuditResult:
    """Audit ``mechanism`` on neighbouring inputs ``a`` and ``b`` with ``n`` samples each."""
    values_a, values_b = _inputs(mechanism, a, b, n)
    ea = _events(mechanism, mechanism.perturb(values_a, rng), a, b)
    eb = _events(mechanism, mechanism.perturb(values_b, rng), a, b)
    size = int(max(ea.max(), eb.max())) + 1
    ca, cb = np.bincount(ea, minlength=size), np.bincount(eb, minlength=size)
    # Four one-sided bounds per event (each probability's lower and upper, under each input), all
    # of which must hold for every ratio to hold: Bonferroni over all of them.
    bounds = 4 * size
    level = alpha / bounds
    lower_a = np.where(ca > 0, beta.ppf(level, ca, n - ca + 1), 0.0)
    upper_a = np.where(ca < n, beta.ppf(1 - level, ca + 1, n - ca), 1.0)
    lower_b = np.where(cb > 0, beta.ppf(level, cb, n - cb + 1), 0.0)
    upper_b = np.where(cb < n, beta.ppf(1 - level, cb + 1, n - cb), 1.0)
    with np.errstate(divide="ignore"):
        ratios = np.concatenate([np.log(lower_a / upper_b), np.log(lower_b / upper_a)])
    best = int(np.argmax(ratios))
    return AuditResult(float(max(ratios[best], 0.0)), best % size, n)
