"""draft_spec drafts from a pandas DataFrame the spec ``python -m aggregator spec --csv`` drafts
from the same sample written to a file: categories from the data, numeric columns with declared
ranges (refused without), what the sample cannot decide warned."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from aggregator.operator.cli import main as aggregator
from aggregator.operator.specdraft import DraftNote, draft_spec
from participant import CollectionSpec
from sim.estimator import LDPNaiveBayes


def categorical_sample(m=3000, seed=10) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, m)
    return pd.DataFrame({
        "colour": np.where(rng.random(m) < 0.8, np.where(y, "red", "blue"), "green"),
        "size": pd.Categorical(rng.choice(["S", "M", "L"], m)),
        "smoker": rng.random(m) < 0.3,
        "children": rng.integers(0, 4, m),
        "outcome": np.where(y, "yes", "no"),
    })  # fmt: skip


def numeric_sample(m=3000, seed=10) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, m)
    return pd.DataFrame({"a": rng.normal(0, 1, m) + y, "b": rng.normal(0, 1, m) - y, "class": y})


def cli_draft(tmp_path, frame: pd.DataFrame, *args) -> dict:
    path, out = tmp_path / "sample.csv", tmp_path / "spec.json"
    frame.to_csv(path, index=False)
    assert aggregator(["spec", "--csv", str(path), *args, "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_categorical_frame_drafts_the_command_lines_spec(tmp_path):
    sample = categorical_sample()
    with pytest.warns(DraftNote, match="categories come from the sample"):
        spec = draft_spec(sample, label="outcome", protocol="OUE", epsilon=4)
    assert isinstance(spec, CollectionSpec) and spec.label == "outcome"
    assert [(f.name, f.categories) for f in spec.features] == [
        ("colour", ("blue", "green", "red")), ("size", ("L", "M", "S")), ("smoker", ("False", "True")),
        ("children", ("0", "1", "2", "3")),
    ]  # fmt: skip
    assert spec.classes == ("no", "yes") and spec.protocol == "OUE" and spec.epsilon == 4
    assert spec.to_dict() == cli_draft(tmp_path, sample, "--label", "outcome", "--protocol", "OUE", "--eps", "4")
    assert CollectionSpec.from_json(spec.to_json()) == spec
    # The draft is what a fit takes: the sample's records with the declared domains.
    assert LDPNaiveBayes(spec=spec, random_state=0).fit(sample, sample.outcome).score(sample, sample.outcome) > 0.6


def test_numeric_columns_need_ranges_and_then_draft_the_command_lines_spec(tmp_path):
    sample = numeric_sample()
    with pytest.raises(ValueError, match=r"numeric columns \['a', 'b'\] need declared ranges: draft_spec\(\.\.\., ranges="):
        draft_spec(sample, label="class")
    ranges = {"a": (-3, 5), "b": (-5, 3)}
    for model in ("discrete", "gaussian"):
        with pytest.warns(DraftNote):
            spec = draft_spec(sample, "class", ranges=ranges, model=model, epsilon=4)
        assert spec.model == model and [(f.name, f.low, f.high) for f in spec.continuous.inputs] == [
            ("a", -3, 5), ("b", -5, 3)
        ]
        ranged = [f"--range={name}={low}:{high}" for name, (low, high) in ranges.items()]
        assert spec.to_dict() == cli_draft(tmp_path, sample, "--label", "class", *ranged, "--model", model, "--eps", "4")
        labels = sample["class"].astype(str)  # the spec's classes, as written
        assert LDPNaiveBayes(spec=spec, random_state=0).fit(sample, labels).score(sample, labels) > 0.6
    with pytest.warns(DraftNote, match='ranges="data" takes ranges from the surveyed people'):
        assert draft_spec(sample, "class", ranges="data").continuous.inputs[0].low == sample.a.min()


def test_what_draft_spec_refuses():
    with pytest.raises(ValueError, match="no column 'outcom' for label=.*did you mean 'outcome'"):
        draft_spec(categorical_sample(), "outcom")
    mixed = numeric_sample().assign(colour="red")
    with pytest.raises(ValueError, match=r"numeric columns \['a', 'b'\] and categorical ones \['colour'\]"):
        draft_spec(mixed, "class", ranges="data")
    with pytest.warns(DraftNote):
        assert [f.name for f in draft_spec(mixed, "class", drop=["a", "b"]).features] == ["colour"]
