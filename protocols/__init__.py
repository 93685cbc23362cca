"""LDP mechanisms: frequency oracles (DE, SUE, OUE, SHE, THE). Pure mathematics, no I/O."""

from .base import FrequencyOracle, Mechanism, OracleState, PureOracle
from .direct import DirectEncoding
from .histogram import SummationHistogramEncoding, ThresholdHistogramEncoding
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

DEFAULT_THETA = 0.25
# Not a protocol of its own: per input, whichever of DE and OUE has the smaller estimate variance
# for that domain size and ε (DE when d < 3e^ε + 2).
ADAPTIVE = "auto"
PROTOCOL_NAMES = (*FREQUENCY_ORACLES, ADAPTIVE)


def make_oracle(protocol: str, epsilon: float, domain_size: int, theta: float = DEFAULT_THETA) -> FrequencyOracle:
    """The frequency oracle named ``protocol`` (one of :data:`FREQUENCY_ORACLES`, or ``"auto"``)."""
    if protocol == ADAPTIVE:
        candidates = [DirectEncoding(epsilon, domain_size), OptimisedUnaryEncoding(epsilon, domain_size)]
        return min(candidates, key=lambda oracle: oracle.variance(1)[0])
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
]
