"""The simulator's inputs are the device's: for the same records, what every figure is computed from
(:func:`participant.encoding.population_inputs`, and the categorical runner's joint keys) equals what
:func:`participant.encoding.record_input` gives a device, input by input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from participant.encoding import population_inputs, raw_field_names, record_input
from sim.datasets import load_dataset
from sim.experiment import Runner, Setup, spec_for

ROWS = 300


def records(data, spec, rows):
    """The data set's first ``rows`` rows as the records a device is given."""
    names = raw_field_names(spec)
    values = data.X[:rows].tolist()
    return [dict(zip(names, [*row, label])) for row, label in zip(values, data.y[:rows].tolist())]


def device_inputs(spec, people, i):
    rng = np.random.default_rng(0)
    return np.concatenate([record_input(person, spec, i, rng) for person in people])


def test_a_categorical_simulation_gives_every_person_the_inputs_their_device_would():
    car = load_dataset("car")
    spec = spec_for(car, "DE", 1.0)
    people = records(car, spec, ROWS)
    simulated = population_inputs(spec, car.X[:ROWS], car.y[:ROWS])
    runner = Runner(car)
    for i in range(spec.n_inputs):
        device = device_inputs(spec, people, i)
        assert np.array_equal(device, simulated[i]), i
        # The fast runner's keys are the same inputs, offset into one histogram.
        assert np.array_equal(runner.keys[:ROWS, i] - runner.input_offsets[i], device), i


@pytest.mark.parametrize("setup", [Setup("discrete", bins=4), Setup("gaussian", approach=3), Setup("gaussian", approach=1)])
def test_a_continuous_simulation_gives_every_person_the_inputs_their_device_would(setup):
    data = load_dataset("diabetes")
    spec = spec_for(data, "DE", 1.0, setup=setup, X_train=data.X, y_train=data.y)
    people = records(data, spec, ROWS)
    X = data.X[:ROWS].copy()
    # Values outside the declared ranges: the device and the simulator clip them alike.
    X[0, 0], people[0][spec.continuous.inputs[0].name] = 1e6, 1e6
    X[1, 1], people[1][spec.continuous.inputs[1].name] = -5.0, -5.0
    simulated = population_inputs(spec, X, data.y[:ROWS])
    for i in range(spec.n_inputs):
        assert np.allclose(device_inputs(spec, people, i), simulated[i]), i
    if setup.model == "gaussian":
        # The device builds its Gaussian inputs with the simulator's function: check them against
        # their definition too. Each coordinate z (and z²) sits at the person's class, zeros elsewhere.
        c = np.array([spec.class_codes[label] for label in data.y[:ROWS]])
        Z = np.clip(spec.continuous.transform(X), -1, 1)
        k, r = spec.n_classes, Z.shape[1]
        at_class = np.zeros((ROWS, r, k))
        at_class[np.arange(ROWS), :, c] = Z
        expected = [c] + (
            [v for j in range(r) for v in (at_class[:, j], at_class[:, j] ** 2)]
            if setup.approach == 3
            else [at_class.reshape(ROWS, -1), (at_class**2).reshape(ROWS, -1)]
        )
        for i in range(spec.n_inputs):
            assert np.allclose(simulated[i], expected[i]), i


def test_an_undeclared_category_is_reported_as_a_uniformly_drawn_declared_one():
    """Where the simulator has no such value, the device's input is the declared categories'
    uniform mixture with the person's class: 4,000 draws of car's `buying` = 'free'."""
    car = load_dataset("car")
    spec = spec_for(car, "DE", 1.0)
    person = records(car, spec, 1)[0] | {"buying": "free"}
    c = spec.class_codes[person["class"]]
    rng = np.random.default_rng(1)
    codes = np.array([int(record_input(person, spec, 1, rng)[0]) for _ in range(4000)])
    assert set(codes % spec.n_classes) == {c}
    counts = np.bincount(codes // spec.n_classes, minlength=len(spec.features[0].categories))
    assert chisquare(counts).pvalue > 1e-3, counts
