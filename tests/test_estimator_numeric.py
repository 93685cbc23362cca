"""LDPNaiveBayes reads numbers as the command line reads a CSV's: floats need declared ranges (or
ranges="data", warned), are binned or modelled as Gaussians, and a fit without ranges is refused."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

from sim.datasets import load_dataset
from sim.estimator import LDPNaiveBayes
from sim.experiment import Setup, run_once


def wine():
    return load_wine(return_X_y=True, as_frame=True)


def test_a_float_dataframe_without_ranges_is_refused_naming_its_columns_and_the_option():
    X, y = wine()
    with pytest.raises(ValueError) as refused:
        LDPNaiveBayes(epsilon=2).fit(X, y)
    message = str(refused.value)
    assert "ranges=" in message and "ranges=\"data\"" in message
    assert all(repr(column) in message for column in X.columns)
    # An array of floats likewise, its columns named by position.
    with pytest.raises(ValueError, match=r"\['x0', 'x1'.*ranges="):
        LDPNaiveBayes().fit(X.to_numpy(), y)


def test_ranges_from_the_data_warn_and_score_well_above_the_constant_classifier():
    X, y = wine()
    scores, constants = [], []
    for seed in range(4):
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
        with pytest.warns(UserWarning, match='ranges="data" takes ranges from the surveyed people'):
            fitted = LDPNaiveBayes(epsilon=4, ranges="data", random_state=seed).fit(X_train, y_train)
        scores.append(fitted.score(X_test, y_test))
        constants.append(y_test.value_counts(normalize=True).max())
        # Binned as the spec says: 13 numeric inputs of 4 equal-width bins over the data's ranges.
        assert fitted.spec_.continuous is not None and fitted.spec_.continuous.bins == 4
        assert [f.name for f in fitted.spec_.continuous.inputs] == list(X.columns)
        assert fitted.spec_.continuous.inputs[0].low == X_train["alcohol"].min()
        assert list(fitted.classes_) == [0, 1, 2] and fitted.predict(X_test).dtype == y.dtype
    assert min(np.subtract(scores, constants)) > 0.2, (scores, constants)


def test_the_estimator_is_the_command_lines_collection_of_a_continuous_data_set():
    """Declared ranges (patterns allowed), binned or Gaussian: the same spec and the same reports
    as ``python -m sim --dataset diabetes`` on the same split, so the same accuracy."""
    data = load_dataset("diabetes", download=False)
    frame = pd.DataFrame(data.X, columns=data.feature_names)
    ranges = dict(zip(data.feature_names, data.ranges))
    for model in ("discrete", "gaussian"):
        X_train, X_test, y_train, y_test = train_test_split(frame, data.y, test_size=0.2, random_state=1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # declared ranges within the data: nothing to warn of
            fitted = LDPNaiveBayes("auto", 4.0, ranges=ranges, model=model, random_state=1).fit(X_train, y_train)
        simulated = run_once(data, "auto", 4.0, 1, ("normsub",), setup=Setup(model), mode="fast")
        assert fitted.spec_.model == model
        assert fitted.score(X_test, y_test) == simulated.accuracy["normsub"]
    # A value beyond its range is clipped at prediction, as a device clips it.
    assert len(fitted.predict(X_test.assign(Glucose=1e6))) == len(X_test)


def test_a_pattern_range_a_narrow_range_and_a_mixed_table():
    rng = np.random.default_rng(10)  # not the fits' seeds: their draws would follow the data's
    y = rng.integers(0, 2, 2000)
    X = pd.DataFrame(rng.normal(0, 1, (2000, 3)) + y[:, None], columns=["a", "b", "c"])
    scores = [LDPNaiveBayes(epsilon=4, ranges={"*": (-3, 4)}, random_state=s).fit(X, y).score(X, y) for s in range(3)]
    assert min(scores) > 0.7, scores  # the non-private model scores 0.76
    with pytest.warns(UserWarning, match="of 'a' lies outside its declared range 0:0.5 and is clipped"):
        LDPNaiveBayes(ranges={"a": (0, 0.5), "*": (-3, 4)}, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match=r"numeric columns \['a', 'b', 'c'\] and categorical ones \['colour'\]"):
        LDPNaiveBayes(ranges="data").fit(X.assign(colour=np.where(y, "red", "blue")), y)
    with pytest.raises(ValueError, match="ranges must be"):
        LDPNaiveBayes(ranges=(0, 1)).fit(X, y)


def test_categorical_tables_are_read_as_before():
    """Strings, booleans and integers with few values stay categories, with no warning; an
    integer column of many values is numeric, as the command line detects it."""
    rng = np.random.default_rng(10)
    y = rng.integers(0, 2, 500)
    X = pd.DataFrame({"colour": np.where(y, "red", "blue"), "flag": y == 1, "level": rng.integers(0, 5, 500)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = LDPNaiveBayes(epsilon=4, random_state=0).fit(X, y)
    assert fitted.spec_.continuous is None and [len(f.categories) for f in fitted.spec_.features] == [2, 2, 5]
    with pytest.raises(ValueError, match=r"numeric columns \['age'\] need declared ranges"):
        LDPNaiveBayes().fit(pd.DataFrame({"age": rng.integers(18, 90, 500)}), y)
    # Declared categories take every column as categorical, floats included.
    floats = pd.DataFrame({"score": np.where(y, 1.5, 0.5)})
    assert LDPNaiveBayes(categories=[[0.5, 1.5]], random_state=0).fit(floats, y).spec_.continuous is None
