"""Poisoning checks: is a collection's report distribution plausible under its protocol?

Fake participants can send any valid report, and LDP makes each one deniable; what they cannot
hide is an aggregate no honest population could produce. Each check is a z-score computed from
the running statistics alone:

- unary encodings and THE: the total number of set bits. An honest report sets its true bit with
  probability p and each of the others with q, so the total over n reports has mean
  ``n (p + (d-1) q)`` and variance ``n (p(1-p) + (d-1) q(1-q))`` whatever the data.
  (Reports with every bit set, a classic way to inflate counts, push it far up: with OUE at ε = 1
  and d = 6, about 3% of them among honest reports reach the threshold.)
- SHE: the sum of all components is ``n`` plus the sum of ``n·d`` noise draws.
- DE: every value is reported at least ``n·q`` times in expectation (even if nobody holds it); a
  count far below that (a negative estimate beyond noise) means reports were withheld or forged,
  e.g. a flood of one value. One-sided, and blind where every value has honest holders.
- Laplace means: every entry lies in [-1, 1], so the mean report's coordinates do too, up to noise
  (one-sided).

A collection is flagged when some input's |z| exceeds :data:`Z_THRESHOLD` (a false alarm about
once in 10^9 inputs per check). This detects gross poisoning only: a clever adversary can keep
every aggregate plausible while still shifting estimates; see the documentation.
"""

from __future__ import annotations

import math

import numpy as np

from protocols import DirectEncoding, ThresholdHistogramEncoding, UnaryEncoding
from protocols.histogram import SummationHistogramEncoding
from protocols.mean import LaplaceMean

from .statistics import CollectionStatistics

# Standard deviations from what honest reports give at which an input is flagged: honest collections
# pass at about one in 10^9 per input under the normal approximation, so a flag means something.
Z_THRESHOLD = 6.0


def input_z_score(oracle, state) -> float | None:
    """The check's z-score for one input, or None when it has no check or no reports."""
    n = state.n
    if n == 0:
        return None
    if isinstance(oracle, (UnaryEncoding, ThresholdHistogramEncoding)):
        d, p, q = oracle.domain_size, oracle.p, oracle.q
        mean = n * (p + (d - 1) * q)
        var = n * (p * (1 - p) + (d - 1) * q * (1 - q))
        return float((state.support.sum() - mean) / math.sqrt(var))
    if isinstance(oracle, SummationHistogramEncoding):
        var = n * oracle.domain_size * oracle.variance(1)[0]
        return float((state.support.sum() - n) / math.sqrt(var))
    if isinstance(oracle, DirectEncoding):
        # One-sided: only a deficit below the n·q floor is impossible for honest reports.
        q = oracle.q
        z = (state.support - n * q) / math.sqrt(n * q * (1 - q))
        return float(min(z.min(), 0.0))
    if isinstance(oracle, LaplaceMean):
        # One-sided: only a mean beyond [-1, 1] is impossible for honest reports.
        excess = np.abs(state.support / n) - 1.0
        return float(max(excess.max() / math.sqrt(oracle.variance(n)[0]), 0.0))
    return None


def plausibility(stats: CollectionStatistics) -> dict:
    """Per input its z-score, and whether the collection looks poisoned."""
    spec = stats.spec
    inputs = []
    for name, oracle, state in zip(spec.input_names, spec.oracles, stats.states):
        z = input_z_score(oracle, state)
        inputs.append({"input": name, "reports": state.n, "z": z, "flagged": z is not None and abs(z) > Z_THRESHOLD})
    return {"flagged": any(i["flagged"] for i in inputs), "threshold": Z_THRESHOLD, "inputs": inputs}
