"""The device path samples exactly: realised probabilities are the samplers' own integer
thresholds over 2^64, and their ratios are checked against e^ε with exact arithmetic (fractions,
and 80-digit decimal logarithms that share no code with the samplers)."""

import decimal
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from participant.randomness import SecureGenerator
from protocols import make_oracle
from protocols.audit import audit
from protocols.exact import (
    ONE,
    ExactRandomness,
    bernoulli_exp,
    coins,
    discrete_laplace,
    exp_lower,
    grid_rate,
)
from protocols.histogram import SummationHistogramEncoding
from protocols.mean import LaplaceMean, OneBitMean
from protocols.noise import GRID

EPSILONS = [1e-3, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0, 50.0]
decimal.getcontext().prec = 80


def log_at_most(ratio: Fraction, epsilon: float) -> bool:
    """ln(ratio) <= ε, decided with 80 significant digits (ε, a float, is exact in Decimal)."""
    return (decimal.Decimal(ratio.numerator) / decimal.Decimal(ratio.denominator)).ln() <= decimal.Decimal(epsilon)


def tight(ratio: Fraction, epsilon: float) -> bool:
    """The realised ratio is e^ε to within 1e-9 (relative): exactness costs no accuracy."""
    gap = decimal.Decimal(epsilon) - (decimal.Decimal(ratio.numerator) / decimal.Decimal(ratio.denominator)).ln()
    return gap < decimal.Decimal("1e-9")


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_exp_lower_is_a_tight_lower_bound(epsilon):
    bound = exp_lower(Fraction(epsilon))
    assert log_at_most(bound, epsilon) and tight(bound, epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("d", [2, 7, 500])
def test_direct_encoding_realises_at_most_e_eps(epsilon, d):
    oracle = make_oracle("DE", epsilon, d)
    keep = Fraction(oracle.exact_keep_threshold, ONE)
    other = (1 - keep) / (d - 1)
    assert 0 < keep < 1 and log_at_most(keep / other, epsilon)
    if epsilon <= 20:  # beyond, q is below 2^-64 and the realised ratio is smaller than e^ε
        assert tight(keep / other, epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("protocol", ["SUE", "OUE"])
def test_unary_encodings_realise_at_most_e_eps(epsilon, protocol):
    t_p, t_q = make_oracle(protocol, epsilon, 5).exact_thresholds
    p, q = Fraction(t_p, ONE), Fraction(t_q, ONE)
    assert 0 < q < p < 1
    ratio = p * (1 - q) / ((1 - p) * q)
    assert log_at_most(ratio, epsilon)
    if epsilon <= 20:
        assert tight(ratio, epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_one_bit_mechanism_realises_at_most_e_eps(epsilon):
    mechanism = OneBitMean(epsilon, 3)
    lo, hi = mechanism.exact_bounds
    assert log_at_most(Fraction(hi, lo), epsilon) and log_at_most(Fraction(ONE - lo, ONE - hi), epsilon)
    thresholds = mechanism.exact_thresholds(np.array([-1.0, -0.3, 0.0, 0.7, 1.0]))
    assert all(lo <= t <= hi for t in thresholds)
    assert thresholds[2] == ONE // 2  # v = 0: a fair coin, so the class stays hidden
    # Unbiased: P(u = 1 | v) = 1/2 + v (e^ε - 1) / (2 (e^ε + 1)), to within the thresholds' grid.
    e = np.exp(epsilon)
    ideal = 0.5 + np.array([-1.0, -0.3, 0.0, 0.7, 1.0]) * (e - 1) / (2 * (e + 1))
    np.testing.assert_allclose(np.array(thresholds, dtype=float) / ONE, ideal, atol=1e-12)
    if epsilon <= 20:
        assert tight(Fraction(thresholds[-1], thresholds[0]), epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_grid_noise_rates_are_exact(epsilon):
    # DLap(exp(-rate)) on grid steps: neighbours Δ apart (Δ/GRID steps) have ratio exp(rate·Δ/GRID).
    assert SummationHistogramEncoding(epsilon, 4).exact_rate * 2 / Fraction(GRID) == Fraction(epsilon)
    assert LaplaceMean(epsilon, 6, 6.0).exact_rate * 6 / Fraction(GRID) == Fraction(epsilon)


class Words(ExactRandomness):
    """A scripted source, to read the coins' comparison off directly."""

    def __init__(self, words):
        self._words = list(words)

    def words(self, count):
        out, self._words = self._words[:count], self._words[count:]
        return np.array(out, dtype=np.uint64)

    def randbelow(self, n):
        raise AssertionError("not used")


def test_a_coin_is_true_for_exactly_threshold_words():
    t = 12345678901234567890
    assert coins(Words([t - 1, t, t + 1, 0]), t, 4).tolist() == [
        True,
        False,
        False,
        True,
    ]
    assert coins(Words([ONE - 1]), ONE, 1).tolist() == [True]  # threshold 2^64: certain
    assert coins(Words([0]), 0, 1).tolist() == [False]


class SeededExact(ExactRandomness):
    """A reproducible exact source for statistical tests (Python's Mersenne Twister)."""

    def __init__(self, seed):
        self.random = random.Random(seed)

    def words(self, count):
        return np.array([self.random.getrandbits(64) for _ in range(count)], dtype=np.uint64)

    def randbelow(self, n):
        return self.random.randrange(n)


@pytest.mark.parametrize("rate", [Fraction(1, 3), Fraction(5, 2), Fraction(7, 3)])
def test_the_exact_discrete_laplace_has_the_stated_distribution(rate):
    # Rates with numerator > 1 exercise the floor of X / s; 30,000 draws, seeded.
    draws = discrete_laplace(SeededExact(int(rate * 6)), rate, 30_000)
    counts = Counter(draws.tolist())
    ks = np.arange(-12, 13)
    r = np.exp(-float(rate))
    pmf = (1 - r) / (1 + r) * r ** np.abs(ks)
    keep = pmf * len(draws) >= 5  # cells with enough expected draws for the chi-square test
    observed = np.array(
        [counts.get(int(k), 0) for k in ks[keep]]
        + [sum(v for k, v in counts.items() if k not in set(ks[keep].tolist()))]
    )
    expected = np.append(pmf[keep], 1 - pmf[keep].sum()) * len(draws)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    # Large values occur: the exact sampler has no largest output.
    assert np.abs(discrete_laplace(SecureGenerator(), Fraction(1, 1 << 40), 20)).max() > 1 << 30


def test_bernoulli_exp_has_the_stated_probability():
    rng = SecureGenerator()
    for gamma in (Fraction(1, 3), Fraction(5, 2)):
        hits = sum(bernoulli_exp(rng, gamma) for _ in range(20_000))
        assert stats.binomtest(hits, 20_000, float(np.exp(-float(gamma)))).pvalue > 1e-4


@pytest.mark.parametrize("protocol", ["DE", "SUE", "OUE"])
def test_the_device_path_passes_the_audit(protocol):
    oracle = make_oracle(protocol, 1.0, 4)
    result = audit(oracle, 0, 1, 200_000, SecureGenerator())
    assert 0.8 < result.epsilon_lower_bound <= 1.0


def test_the_device_histogram_noise_passes_the_audit():
    oracle = make_oracle("SHE", 1.0, 2)
    result = audit(oracle, 0, 1, 20_000, SecureGenerator())
    assert 0.5 < result.epsilon_lower_bound <= 1.0


def test_grid_rate_is_exact_for_floats():
    assert grid_rate(0.1, 2.0, GRID) == Fraction(0.1) / 2048


class ScriptedSecure(SecureGenerator):
    """The secure generator's own arithmetic on scripted 64-bit words; records each request."""

    def __init__(self, *batches):
        self.batches, self.requested = [list(b) for b in batches], []

    def _words(self, count):
        self.requested.append(count)
        return np.array(self.batches.pop(0), dtype=np.uint64)


def test_secure_integers_reject_exactly_the_words_past_the_last_whole_multiple():
    span = 7
    limit = (2**64 // span) * span - 1  # the largest accepted word
    rng = ScriptedSecure([limit, limit + 1, 0, 13], [5])
    out = rng.integers(3, 10, size=(2, 2))
    assert out.dtype == np.int64 and out.shape == (2, 2)
    assert out.ravel().tolist() == [limit % span + 3, 3, 13 % span + 3, 5 + 3]
    assert rng.requested == [4, 1]  # one word asked again for the one rejected
    # One draw takes Python's secrets.randbelow (exact, and without numpy's per-call cost).
    one = ScriptedSecure([12])
    value = one.integers(5, 10)
    assert 5 <= value < 10 and type(value) is int and one.requested == []
    assert one.integers(5, 10, size=1).shape == (1,) and one.requested == []
    with pytest.raises(ValueError, match="^high must be greater than low$"):
        SecureGenerator().integers(5, 5)


def test_secure_floats_take_the_top_53_bits():
    rng = ScriptedSecure([2**64 - 1], [0, 2**11, 2**63, 2**64 - 1, 2**64 - 2**11, 1])
    assert rng.random() == 1 - 2**-53 and rng.requested == [1]
    grid = rng.random(size=(2, 3))
    assert grid.shape == (2, 3) and grid.dtype == np.float64
    assert grid.ravel().tolist() == [0.0, 2**-53, 0.5, 1 - 2**-53, 1 - 2**-53, 0.0]


def test_exact_edges_e_to_the_zero_and_coins_beyond_64_bits():
    assert exp_lower(Fraction(0)) == 1
    with pytest.raises(ValueError, match="x >= 0"):
        exp_lower(Fraction(-1, 10**9))
    # A threshold of 2^64 (a certain coin) takes the exact-integer path; equality is still False.
    assert coins(Words([ONE - 1, 5, 4]), np.array([ONE, 5, 5], dtype=object), 3).tolist() == [True, False, True]
    assert coins(Words([]), np.array([], dtype=object), 0).tolist() == []
