"""LDP mechanisms: frequency oracles (DE, SUE, OUE, SHE, THE). Pure mathematics, no I/O."""

import numpy as np

from .base import FrequencyOracle, Mechanism, OracleState, PureOracle, simulate_states
from .direct import DirectEncoding
from .histogram import SummationHistogramEncoding, ThresholdHistogramEncoding, optimal_theta
from .unary import OptimisedUnaryEncoding, SymmetricUnaryEncoding, UnaryEncoding

FREQUENCY_ORACLES: dict[str, type[FrequencyOracle]] = {
    cls.name: cls
    for cls in (
        DirectEncoding,
        SymmetricUnaryEncoding,
        OptimisedUnaryEncoding,
        SummationHistogramEncoding,
        ThresholdHistogramEncoding,
    )
}

# THE's threshold when none is given: the variance-optimal one for the ε (optimal_theta); the
# paper's experiments use PAPER_THETA.
DEFAULT_THETA = None
PAPER_THETA = 0.25
# Not a protocol of its own: per input, whichever of DE and OUE has the smaller exact variance for
# that domain size and ε, summed over the domain for a population spread evenly over it.
ADAPTIVE = "auto"
PROTOCOL_NAMES = (*FREQUENCY_ORACLES, ADAPTIVE)


def total_variance(oracle: PureOracle) -> float:
    """The exact variance of one report's count estimates summed over the domain, the report's
    value spread evenly over it (the true counts' term included, which the approximation
    ``q(1 − q)/(p − q)²`` per value leaves out and which separates DE from OUE near ``d = 3e^ε + 2``)."""
    d = oracle.domain_size
    return float(oracle.variance(1, np.full(d, 1.0 / d)).sum())


def make_oracle(protocol: str, epsilon: float, domain_size: int, theta: float | None = DEFAULT_THETA) -> FrequencyOracle:
    """The frequency oracle named ``protocol`` (one of :data:`FREQUENCY_ORACLES`, or ``"auto"``);
    ``theta`` is THE's threshold (None: :func:`optimal_theta`)."""
    if protocol == ADAPTIVE:
        candidates = [DirectEncoding(epsilon, domain_size), OptimisedUnaryEncoding(epsilon, domain_size)]
        return min(candidates, key=total_variance)
    try:
        cls = FREQUENCY_ORACLES[protocol]
    except KeyError:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(FREQUENCY_ORACLES)}") from None
    if cls is ThresholdHistogramEncoding:
        return cls(epsilon, domain_size, theta=theta)
    return cls(epsilon, domain_size)


__all__ = [
    "ADAPTIVE",
    "DEFAULT_THETA",
    "PAPER_THETA",
    "PROTOCOL_NAMES",
    "FREQUENCY_ORACLES",
    "DirectEncoding",
    "FrequencyOracle",
    "Mechanism",
    "OptimisedUnaryEncoding",
    "OracleState",
    "PureOracle",
    "SummationHistogramEncoding",
    "SymmetricUnaryEncoding",
    "ThresholdHistogramEncoding",
    "UnaryEncoding",
    "make_oracle",
    "simulate_states",
    "optimal_theta",
    "total_variance",
]
