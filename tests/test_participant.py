import json

import msgpack
import numpy as np
import pytest
from scipy import stats

from participant import (
    CollectionSpec,
    Participant,
    RecordError,
    SecureGenerator,
    SpecError,
    encode_features,
    encode_record,
    input_values,
    joint_decode,
    joint_encode,
)

from .conftest import TABLE_1, table_1_spec

RECORD = {"age": "Young", "income": "Medium", "gender": "Female", "missed_payment": "No"}


class ExplodingRng:
    """Fails the test if anything is randomised."""

    def random(self, *a, **k):
        raise AssertionError("randomness was drawn for a bad record")

    integers = random


def test_spec_round_trips_through_json_and_msgpack(spec):
    assert CollectionSpec.from_json(spec.to_json()) == spec
    assert CollectionSpec.from_msgpack(spec.to_msgpack()) == spec
    assert json.loads(spec.to_json())["protocol"] == "DE"
    assert msgpack.unpackb(spec.to_msgpack())["features"][0] == {
        "name": "age",
        "categories": ["Young", "Medium", "Old"],
    }


def test_spec_states_what_a_person_spends(spec):
    assert spec.epsilon_per_person == spec.epsilon == 1.0
    assert "epsilon=1-LDP per person" in spec.privacy_statement()


def test_spec_domain_sizes_follow_the_joint_encoding(spec):
    # Class input k = 2; age 3·2, income 3·2, gender 2·2 (the paper's 6, 6 and 4).
    assert spec.domain_sizes == (2, 6, 6, 4)
    assert [o.domain_size for o in spec.oracles] == [2, 6, 6, 4]
    assert spec.input_names == ("missed_payment", "age", "income", "gender")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"protocol": "XYZ"}, "protocol"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"theta": 1.0}, "theta"),
        ({"classes": ["Yes"]}, "classes"),
        ({"classes": ["Yes", "Yes"]}, "classes"),
        ({"features": [{"name": "age", "categories": []}]}, "age"),
        ({"features": [{"name": "age"}]}, "categories"),
        ({"input_selection": "sometimes"}, "input_selection"),
        ({"colour": "blue"}, "colour"),
        ({"version": 99}, "version"),
    ],
)
def test_invalid_specs_name_the_field(spec, change, field):
    data = {**spec.to_dict(), **change}
    with pytest.raises(SpecError, match=field):
        CollectionSpec.from_dict(data)


def test_garbage_spec_bytes_are_a_spec_error():
    with pytest.raises(SpecError, match="JSON"):
        CollectionSpec.from_json("{not json")
    with pytest.raises(SpecError):
        CollectionSpec.from_msgpack(b"\xc1")


def test_joint_encoding_matches_the_paper():
    # Paper, 1-based: Age (Young=1, Medium=2, Old=3), class v in {1, 2}: input (a-1)·k + v.
    # 1 is "young and missed", 6 "old and did not miss". Ours is the same, 0-based.
    assert joint_encode(0, 0, 2) == 0
    assert joint_encode(2, 1, 2) == 5
    a, c = np.meshgrid(np.arange(3), np.arange(2), indexing="ij")
    joint = joint_encode(a, c, 2)
    np.testing.assert_array_equal(np.sort(joint.ravel()), np.arange(6))
    back_a, back_c = joint_decode(joint, 2)
    np.testing.assert_array_equal(back_a, a)
    np.testing.assert_array_equal(back_c, c)


def test_input_values_hold_the_class_then_each_joint_input(spec):
    X = np.array([row[:3] for row in TABLE_1], dtype=object)
    codes = encode_features(X, spec)
    labels = np.array([0 if row[3] == "Yes" else 1 for row in TABLE_1])
    inputs = input_values(codes, labels, 2)
    assert inputs.shape == (10, 4)
    np.testing.assert_array_equal(inputs[:, 0], labels)
    # Row 2: Young, High, Female, Yes -> age 0·2+0, income 2·2+0, gender 1·2+0.
    np.testing.assert_array_equal(inputs[1], [0, 0, 4, 2])


@pytest.mark.parametrize(
    "change, field",
    [
        ({"age": "Ancient"}, "age"),
        ({"gender": None}, "gender"),
        ({"missed_payment": "Maybe"}, "missed_payment"),
    ],
)
def test_bad_records_raise_naming_the_field_and_send_nothing(spec, change, field):
    record = {**RECORD, **change}
    with pytest.raises(RecordError) as info:
        Participant(spec, rng=ExplodingRng()).report(record)
    assert info.value.field == field
    assert field in str(info.value)


def test_a_missing_feature_is_named(spec):
    record = dict(RECORD)
    del record["income"]
    with pytest.raises(RecordError, match="income: missing"):
        encode_record(record, spec)


def test_participant_reports_one_input_chosen_uniformly(spec):
    rng = np.random.default_rng(11)
    participant = Participant(spec, rng=rng)
    reports = [participant.report(RECORD) for _ in range(4000)]
    chosen = np.bincount([r.input for r in reports], minlength=spec.n_inputs)
    assert stats.chisquare(chosen).pvalue > 1e-4
    assert all(len(r.report_id) == 16 for r in reports)
    assert len({r.report_id for r in reports}) == len(reports)
    # DE reports are single values within the chosen input's domain.
    assert all(0 <= int(r.payload) < spec.domain_sizes[r.input] for r in reports)


def test_assigned_groups_are_honoured_and_required():
    spec = table_1_spec(input_selection="assigned")
    participant = Participant(spec, rng=np.random.default_rng(0))
    assert participant.report(RECORD, group=2).input == 2
    with pytest.raises(RecordError, match="group"):
        participant.report(RECORD)
    with pytest.raises(RecordError, match="group"):
        participant.report(RECORD, group=4)
    with pytest.raises(RecordError, match="group"):
        Participant(table_1_spec(), rng=np.random.default_rng(0)).report(RECORD, group=1)


def test_participant_uses_the_secure_source_by_default(spec):
    participant = Participant(spec)
    assert isinstance(participant.rng, SecureGenerator)
    report = participant.report(RECORD)
    assert 0 <= report.input < spec.n_inputs


@pytest.mark.parametrize("protocol, shape", [("OUE", (6,)), ("THE", (6,))])
def test_vector_protocols_report_one_vector_over_the_joint_domain(protocol, shape):
    spec = table_1_spec(protocol=protocol, input_selection="assigned")
    report = Participant(spec, rng=np.random.default_rng(0)).report(RECORD, group=1)
    assert report.payload.shape == shape


def test_secure_generator_is_uniform_and_unseeded():
    rng = SecureGenerator()
    u = rng.random(50_000)
    assert u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    ints = rng.integers(0, 7, size=70_000)
    assert ints.min() == 0 and ints.max() == 6
    assert stats.chisquare(np.bincount(ints, minlength=7)).pvalue > 1e-4
    assert isinstance(rng.random(), float) and isinstance(rng.integers(3), int)
    assert not np.array_equal(SecureGenerator().random(8), SecureGenerator().random(8))


def test_secure_integers_cover_exactly_their_range_in_every_form():
    rng = SecureGenerator()
    for args, low, high in (((5,), 0, 5), ((3, 8), 3, 8), ((-2, 2), -2, 2)):
        ints = rng.integers(*args, size=50_000)
        assert ints.min() == low and ints.max() == high - 1, args
        assert stats.chisquare(np.bincount(ints - low, minlength=high - low)).pvalue > 1e-4
    assert {rng.integers(1) for _ in range(50)} == {0}
    assert 0 <= rng.integers(4) < 4 and 10 <= rng.integers(10, 12) < 12
    with pytest.raises(ValueError):
        rng.integers(0)
    with pytest.raises(ValueError):
        rng.integers(5, 5)


def test_refusals_name_their_field_and_assigned_groups_include_0():
    spec = table_1_spec(input_selection="assigned")
    participant = Participant(spec, rng=np.random.default_rng(0))
    assert participant.report(RECORD, group=0).input == 0
    assert participant.report(RECORD, group=spec.n_inputs - 1).input == spec.n_inputs - 1
    cases = [
        (lambda: participant.report(RECORD), "group"),
        (lambda: participant.report(RECORD, group=True), "group"),
        (lambda: participant.report(RECORD, group=-1), "group"),
        (lambda: Participant(table_1_spec(), rng=np.random.default_rng(0)).report(RECORD, group=0), "group"),
        (lambda: Participant(table_1_spec(budget="split")).report(RECORD), "budget"),
        (lambda: Participant(table_1_spec()).reports(RECORD), "budget"),
    ]
    for call, field in cases:
        with pytest.raises(RecordError) as refused:
            call()
        assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    # A seeded generator makes reports reproducible (the simulator relies on it).
    a = Participant(table_1_spec(), rng=np.random.default_rng(9)).report(RECORD)
    b = Participant(table_1_spec(), rng=np.random.default_rng(9)).report(RECORD)
    assert (a.input, int(a.payload)) == (b.input, int(b.payload))
