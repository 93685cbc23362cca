import numpy as np
import pytest

from aggregator import CollectionStatistics
from aggregator.estimation.plausibility import Z_THRESHOLD, plausibility
from participant import CollectionSpec
from participant.continuous import ContinuousFeature, Preparation
from protocols.noise import GRID

from .conftest import table_1_spec


def honest(spec, n, seed):
    rng = np.random.default_rng(seed)
    stats = CollectionStatistics(spec)
    for i, oracle in enumerate(spec.oracles):
        if hasattr(oracle, "domain_size"):
            values = rng.integers(0, oracle.domain_size, n)
        else:  # class-hiding vectors
            values = np.zeros((n, oracle.dim))
            values[np.arange(n), rng.integers(0, oracle.dim, n)] = rng.uniform(-1, 1, n)
        stats.add(i, oracle.perturb(values, rng))
    return stats


GAUSSIAN = CollectionSpec(
    [], ["a", "b"], "OUE", 1.0, continuous=Preparation([ContinuousFeature("x", 0, 1)]), model="gaussian"
)


@pytest.mark.parametrize("spec", [table_1_spec(protocol=p) for p in ("DE", "SUE", "OUE", "SHE", "THE")] + [GAUSSIAN])
def test_honest_collections_are_not_flagged(spec):
    for seed in range(5):
        result = plausibility(honest(spec, 5000, seed))
        assert not result["flagged"], result
        assert all(abs(i["z"]) < 4.5 for i in result["inputs"])  # honest z-scores stay small


def test_reports_with_every_bit_set_are_flagged():
    spec = table_1_spec(protocol="OUE")
    stats = honest(spec, 5000, 0)
    stats.add(1, np.ones((200, 6), dtype=bool))  # 4% fake reports
    result = plausibility(stats)
    assert result["flagged"] and result["inputs"][1]["z"] > Z_THRESHOLD


def test_a_flood_of_one_direct_encoding_value_is_flagged():
    spec = table_1_spec(protocol="DE")
    oracle = spec.oracles[1]
    rng = np.random.default_rng(1)
    stats = CollectionStatistics(spec)
    # Honest people are all young (joint values 0 and 1): values 2-5 are reported only as noise.
    stats.add(1, oracle.perturb(rng.integers(0, 2, 10_000), rng))
    assert not plausibility(stats)["flagged"]
    stats.add(1, np.zeros(3000, dtype=np.int64))  # 3,000 fakes all saying "young and missed"
    assert plausibility(stats)["inputs"][1]["z"] < -Z_THRESHOLD


def test_inflated_histogram_and_mean_reports_are_flagged():
    spec = table_1_spec(protocol="SHE")
    stats = honest(spec, 5000, 2)
    stats.add(2, np.full((200, 6), 40.0))  # far above n in total
    assert plausibility(stats)["flagged"]
    gaussian = honest(GAUSSIAN, 5000, 3)
    fake = np.zeros((300, 2))
    fake[:, 0] = 30 * 1024 * GRID  # every fake says 30
    gaussian.add(1, fake)
    assert plausibility(gaussian)["flagged"]
