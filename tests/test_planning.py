"""Before a collection: the planner's odds that the reports name another class the most common,
against exact collections, and the class share it offers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aggregator import CollectionStatistics
from aggregator.estimation.bootstrap import draw_statistics
from aggregator.estimation.class_prior import pooled_class_shares
from aggregator.estimation.model import NaiveBayesModel
from aggregator.estimation.planning import TOLERATED_COST, class_share_for, majority_outlook
from participant import CollectionSpec, Feature, choose_inputs

CAR_PRIOR = np.array([0.70, 0.22, 0.04, 0.04])


def car_like(epsilon: float, **fields) -> CollectionSpec:
    """Car's shape: four classes, six features of 4, 4, 4, 3, 3 and 3 values, protocol auto."""
    features = [Feature(f"f{i}", [f"v{j}" for j in range(d)]) for i, d in enumerate((4, 4, 4, 3, 3, 3))]
    return CollectionSpec(features, ["unacc", "acc", "good", "vgood"], "auto", epsilon, **fields)


def exact_outlook(spec: CollectionSpec, people: int, collections: int, rng) -> tuple[float, float]:
    """How often exact collections of ``people`` people (features independent of the class)
    name another class than the first the most common, and the class prior's mean accuracy loss:
    what :func:`majority_outlook` predicts. Each person reports the input a device would choose
    (:func:`participant.choose_inputs`), or every input under ``per-input``."""
    conditionals = [np.tile(rng.dirichlet(np.full(len(f.categories), 2.0)), (4, 1)) for f in spec.features]
    truth = NaiveBayesModel(spec, CAR_PRIOR * 1e6, [t * 1e6 for t in conditionals])
    named = []
    for _ in range(collections):
        like = CollectionStatistics(spec)
        if spec.budget == "one-report":
            reports = np.bincount(choose_inputs(spec, people, rng), minlength=spec.n_inputs)
        else:
            reports = np.full(spec.n_inputs, people)
        for state, n in zip(like.states, reports):
            state.n = int(n)
        named.append(pooled_class_shares(draw_statistics(truth, like, rng)).shares.argmax())
    named = np.array(named)
    return float(np.mean(named != 0)), float(np.mean(CAR_PRIOR[0] - CAR_PRIOR[named]))


@pytest.mark.parametrize(
    "fields, people, collections",
    [({}, 1382, 4000), ({"class_share": 0.4}, 1382, 4000), ({"budget": "per-input"}, 200, 1000), ({}, 600, 4000)],
)
def test_the_outlook_matches_exact_collections(fields, people, collections):
    """4,000 exact collections per case at ε = 0.5 (1,000 under ``per-input``, where the
    wrong planner below errs by over 60 standard errors): the share naming another class within three
    binomial standard errors (plus 0.005 for the Gaussian approximation) of the planner's, and the
    mean loss within 0.004 plus three standard errors. A planner that ignored the class share
    (1382 people, 0.4: 2.7 % against 0.8 %) or counted one report per person under ``per-input``
    (about 40 % against 5 %) would fail."""
    rng = np.random.default_rng(3)
    spec = car_like(0.5, **fields)
    planned = majority_outlook(spec, CAR_PRIOR, people)
    wrong, cost = exact_outlook(spec, people, collections, rng)
    assert abs(wrong - planned.wrong) <= 3 * np.sqrt(planned.wrong * (1 - planned.wrong) / collections) + 0.005
    assert abs(cost - planned.cost) <= 3 * 0.66 * np.sqrt(planned.wrong / collections) + 0.004
    assert 0.005 < planned.wrong < 0.5  # every case is one where the class prior can go wrong


def test_the_class_share_offered_is_the_smallest_that_keeps_the_cost_tolerated():
    spec = car_like(0.5)
    share = class_share_for(spec, CAR_PRIOR, 1382)
    assert share is not None and 0.14 < share < 0.6
    assert majority_outlook(replace(spec, class_share=share), CAR_PRIOR, 1382).cost <= TOLERATED_COST
    assert majority_outlook(replace(spec, class_share=round(share - 0.05, 2)), CAR_PRIOR, 1382).cost > TOLERATED_COST
    # Nothing to offer: safe already, no share suffices, or a spec that cannot state one.
    assert majority_outlook(car_like(1.0), CAR_PRIOR, 1382).cost <= TOLERATED_COST
    assert class_share_for(car_like(1.0), CAR_PRIOR, 1382) is None
    assert class_share_for(spec, CAR_PRIOR, 100) is None
    assert class_share_for(car_like(0.5, budget="split"), CAR_PRIOR, 1382) is None
    assert class_share_for(car_like(0.5, input_selection="assigned"), CAR_PRIOR, 1382) is None


def test_a_gaussian_collections_outlook_is_its_class_inputs():
    """A Gaussian collection (approach 3, four coordinates: nine inputs, so the class input gets
    one report in nine) counts the classes from its class input alone. 4,000 exact collections of
    1,000 people at ε = 0.5 with classes 0.6 : 0.4 name the rarer class as often as the planner
    says, within three binomial standard errors plus 0.005; a planner that gave the class input
    every person (under 1 %) or pooled all nine inputs would fail."""
    from participant.continuous import ContinuousFeature, Preparation
    from participant.encoding import population_inputs
    from sim.experiment import simulate_collection

    prep = Preparation([ContinuousFeature(f"z{i}", -1.0, 1.0) for i in range(4)])
    spec = CollectionSpec([], ["a", "b"], "DE", 0.5, continuous=prep, model="gaussian", approach=3)
    rng = np.random.default_rng(6)
    y = np.where(rng.random(1000) < 0.6, "a", "b")
    inputs = population_inputs(spec, rng.uniform(-1, 1, (1000, 4)), y)
    named = [pooled_class_shares(simulate_collection(spec, inputs, rng, "fast")).shares.argmax() for _ in range(4000)]
    wrong = float(np.mean(np.array(named) != 0))
    planned = majority_outlook(spec, np.array([np.mean(y == "a"), np.mean(y == "b")]), 1000)
    assert 0.1 < planned.wrong < 0.45
    assert abs(wrong - planned.wrong) <= 3 * np.sqrt(planned.wrong * (1 - planned.wrong) / 4000) + 0.005
