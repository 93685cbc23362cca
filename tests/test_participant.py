import json

import msgpack
import numpy as np
import pytest
from scipy import stats

from participant import (
    CollectionSpec,
    Feature,
    Participant,
    RecordError,
    SecureGenerator,
    SpecError,
    choose_inputs,
    encode_features,
    encode_labels,
    encode_record,
    input_values,
    joint_decode,
    joint_encode,
)
from participant.continuous import ContinuousFeature, Preparation
from participant.encoding import encode_column, population_inputs
from participant.reporting import input_probabilities

from .conftest import TABLE_1, table_1_spec

RECORD = {"age": "Young", "income": "Medium", "gender": "Female", "missed_payment": "No"}


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


def test_numbers_match_categories_as_written_even_beside_floats():
    # Values mixing 1 and 2.5 must not become floats first: "1" is a category, "1.0" is not.
    n = Feature("n", ("1", "2.5"))
    np.testing.assert_array_equal(encode_column([1, 2.5], n.categories, "n"), [0, 1])
    spec = CollectionSpec([n, Feature("k", ("a", "b"))], ["1", "2.5"], "DE", 1.0)
    np.testing.assert_array_equal(encode_features([[1, "a"], [2.5, "b"]], spec), [[0, 0], [1, 1]])
    only_n = CollectionSpec([n], ["1", "2.5"], "DE", 1.0)
    np.testing.assert_array_equal(encode_features([[1], [2.5]], only_n), [[0], [1]])
    np.testing.assert_array_equal(encode_labels([2.5, 1], only_n), [1, 0])


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
        ({"class_share": 1.0}, "class_share"),
        ({"class_share": "half"}, "class_share"),
        ({"class_share": 0.4, "budget": "split"}, "class_share"),
        ({"class_share": 0.4, "input_selection": "assigned"}, "class_share"),
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


@pytest.mark.parametrize("share", [0.1, 0.4])
def test_a_class_share_sends_that_share_to_the_class_input_and_the_rest_evenly(spec, share):
    """200,000 draws: the class input's share has a standard error near 0.001, so a share off by
    0.01 fails; the features share the rest evenly (χ²)."""
    chosen = choose_inputs(spec, 200_000, np.random.default_rng(5), class_share=share)
    counts = np.bincount(chosen, minlength=spec.n_inputs)
    assert abs(counts[0] / chosen.size - share) < 0.004
    assert stats.chisquare(counts[1:]).pvalue > 1e-4
    uniform = np.bincount(choose_inputs(spec, 200_000, np.random.default_rng(5)), minlength=spec.n_inputs)
    assert stats.chisquare(uniform).pvalue > 1e-4


def test_a_spec_states_its_class_share_and_every_device_follows_it(spec):
    """The spec carries the share (left out of the spec, and of its fingerprint, when not set);
    20,000 participants report the class input at that rate (standard error 0.0035)."""
    shared = CollectionSpec.from_dict({**spec.to_dict(), "class_share": 0.4})
    assert "class_share" not in spec.to_dict() and shared.to_dict()["class_share"] == 0.4
    assert CollectionSpec.from_json(shared.to_json()) == shared and shared.fingerprint != spec.fingerprint
    assert shared.privacy_statement() == spec.privacy_statement()  # the share changes no one's ε
    participant = Participant(shared, rng=np.random.default_rng(8))
    inputs = np.array([participant.report(RECORD).input for _ in range(20_000)])
    counts = np.bincount(inputs, minlength=shared.n_inputs)
    assert abs(counts[0] / inputs.size - 0.4) < 0.015
    assert stats.chisquare(counts[1:]).pvalue > 1e-4
    np.testing.assert_allclose(input_probabilities(shared), [0.4, 0.2, 0.2, 0.2])
    np.testing.assert_allclose(input_probabilities(spec), [0.25] * 4)


@pytest.mark.parametrize("share", [0, 1, -0.1, float("nan")])
def test_a_class_share_outside_0_to_1_is_refused(spec, share):
    with pytest.raises(ValueError, match="class_share"):
        choose_inputs(spec, 10, np.random.default_rng(0), class_share=share)


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
    # Spans past 2**53 must stay exact integers (a detour through float64 would round them).
    wide = rng.integers(0, 2**62 + 1, size=2_000)
    assert wide.min() >= 0 and wide.max() <= 2**62
    assert 850 < np.count_nonzero(wide[wide >= 2**53] % 2) < 1150  # odd half the time: bounds 6.6 sd from 998
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
    assigns = "this collection assigns inputs: pass the group index you were given"
    cases = [
        (lambda: participant.report(RECORD), "group", assigns),
        (lambda: participant.report(RECORD, group=True), "group", assigns),
        (lambda: participant.report(RECORD, group=1.0), "group", assigns),
        (lambda: participant.report(RECORD, group=-1), "group", "must lie in [0, 3], got -1"),
        (lambda: participant.report(RECORD, group=4), "group", "must lie in [0, 3], got 4"),
        (
            lambda: Participant(table_1_spec(), rng=np.random.default_rng(0)).report(RECORD, group=0),
            "group",
            "this collection picks the input at random; do not pass a group",
        ),
        (
            lambda: Participant(table_1_spec(budget="split")).report(RECORD),
            "budget",
            "this collection's budget is 'split': use reports()",
        ),
        (
            lambda: Participant(table_1_spec()).reports(RECORD),
            "budget",
            "this collection takes one report per person: use report()",
        ),
    ]
    for call, field, message in cases:
        with pytest.raises(RecordError) as refused:
            call()
        assert refused.value.field == field and str(refused.value) == f"{field}: {message}"
    assert participant.report(RECORD, group=np.int64(2)).input == 2
    # A seeded generator makes reports reproducible (the simulator relies on it).
    a = Participant(table_1_spec(), rng=np.random.default_rng(9)).report(RECORD)
    b = Participant(table_1_spec(), rng=np.random.default_rng(9)).report(RECORD)
    assert (a.input, int(a.payload)) == (b.input, int(b.payload))


# A spec's refusals word for word (an operator reads them in a 400 answer or on the command line),
# its boundaries, what it normalises, and the privacy statement it publishes.

BASE = table_1_spec().to_dict()
RANGES = {"inputs": [{"name": "h", "low": 0.0, "high": 1.0}]}


@pytest.mark.parametrize("change, message", [
    ({"epsilon": 0.0009}, "epsilon must be a number from 0.001 to 50, got 0.0009"),
    ({"epsilon": 50.5}, "epsilon must be a number from 0.001 to 50, got 50.5"),
    ({"epsilon": "1"}, "epsilon must be a number from 0.001 to 50, got '1'"),
    ({"epsilon": True}, "epsilon must be a number from 0.001 to 50, got True"),
    ({"epsilon": 10**400}, "epsilon must be a number from 0.001 to 50, got 1000000000000000000000000000000000000..."),
    ({"theta": 0.0}, "theta must lie in (0, 1), got 0.0"),
    ({"theta": 1}, "theta must lie in (0, 1), got 1"),
    ({"protocol": "XYZ"}, "protocol must be one of DE, SUE, OUE, SHE, THE, auto, got 'XYZ'"),
    ({"classes": ["Yes"]}, "classes must list at least two class labels"),
    ({"classes": ["Yes", ""]}, "classes must hold non-empty strings, got ['Yes', '']"),
    ({"classes": ["Yes", 3]}, "classes must hold non-empty strings, got ['Yes', 3]"),
    ({"label": ""}, "label must be a non-empty name distinct from the features, got ''"),
    ({"label": "age"}, "label must be a non-empty name distinct from the features, got 'age'"),
    ({"colour": "blue", "shade": 1}, "unknown spec fields: colour, shade"),
    ({"features": "age"}, "features must be a list of {name, categories} mappings"),
    ({"features": [{"name": "", "categories": ["a"]}]}, "feature name must be a non-empty string, got ''"),
    ({"continuous": RANGES}, "a discrete model of continuous features needs bins (equal-width bins per coordinate)"),
])  # fmt: skip
def test_refusals_say_what_is_wrong_word_for_word(change, message):
    with pytest.raises(SpecError) as refused:
        CollectionSpec.from_dict(BASE | change)
    assert str(refused.value) == message


def test_missing_fields_are_listed_and_continuous_specs_need_no_features():
    for drop, message in [
        ({"classes", "epsilon"}, "missing spec fields: classes, epsilon"),
        ({"features"}, "missing spec fields: features"),
    ]:
        with pytest.raises(SpecError) as refused:
            CollectionSpec.from_dict({k: v for k, v in BASE.items() if k not in drop})
        assert str(refused.value) == message
    binned = {k: v for k, v in BASE.items() if k != "features"} | {"continuous": RANGES | {"bins": 3}, "label": "y"}
    assert [f.name for f in CollectionSpec.from_dict(binned).features] == ["h"]
    assert CollectionSpec.from_dict({**BASE, "version": 1}) == CollectionSpec.from_dict(BASE)
    with pytest.raises(SpecError, match="unsupported spec version None"):
        CollectionSpec.from_dict({**BASE, "version": None})


def test_derived_features_may_be_restated_but_not_changed():
    prep = Preparation([ContinuousFeature("h", 0.0, 1.0)], bins=2)
    same = CollectionSpec([Feature("h", ["bin0", "bin1"])], ["a", "b"], "DE", 1.0, continuous=prep)
    assert same.features == (Feature("h", ("bin0", "bin1")),)
    with pytest.raises(SpecError, match="^features are derived from the continuous preparation; leave them out$"):
        CollectionSpec([Feature("h", ["lo", "hi"])], ["a", "b"], "DE", 1.0, continuous=prep)


def test_boundaries_are_inclusive_where_stated_and_values_are_normalised():
    low = CollectionSpec.from_dict(BASE | {"epsilon": 0.001})
    high = CollectionSpec.from_dict(BASE | {"epsilon": 50, "theta": 0.999})
    assert (low.epsilon, high.epsilon) == (0.001, 50.0) and type(high.epsilon) is float
    assert high.theta == 0.999 and type(CollectionSpec.from_dict(BASE | {"theta": 0.5}).theta) is float
    spec = CollectionSpec([{"name": "f", "categories": ["x", "y"]}], ["a", "b"], "DE", 2)
    assert spec.classes == ("a", "b") and type(spec.classes) is tuple
    assert spec.features == (Feature("f", ("x", "y")),) and type(spec.features[0].categories) is tuple
    assert type(spec.epsilon) is float and spec.oracles[0].epsilon == 2.0


def test_budget_round_trips_and_is_left_out_when_default():
    assert "budget" not in table_1_spec().to_dict()
    for budget in ("split", "per-input"):
        spec = table_1_spec(budget=budget)
        assert spec.to_dict()["budget"] == budget and CollectionSpec.from_dict(spec.to_dict()) == spec


def test_privacy_statements_name_mechanism_budget_and_inputs():
    assert table_1_spec(epsilon=2.0).privacy_statement() == (
        "Each person sends one DE report with epsilon=2: epsilon=2-LDP per person for the whole record "
        "(4 inputs, one reported)."
    )
    assert table_1_spec(epsilon=2.0, budget="split").privacy_statement() == (
        "Each person sends 4 DE reports, one per input, each with epsilon=0.5: epsilon=2-LDP per person "
        "for the whole record (budget split)."
    )
    prep = Preparation([ContinuousFeature("h", 0.0, 1.0), ContinuousFeature("w", 0.0, 1.0)])
    laplace = CollectionSpec([], ["a", "b"], "OUE", 1.0, continuous=prep, model="gaussian", approach=1)
    assert laplace.privacy_statement() == (
        "Each person sends one report (class by OUE, values by laplace, scale 4) with epsilon=1: "
        "epsilon=1-LDP per person for the whole record (3 inputs, one reported)."
    )
    one_bit = CollectionSpec([], ["a", "b"], "OUE", 1.0, continuous=prep, model="gaussian", approach=2)
    assert "values by onebit, one bit) with epsilon=1" in one_bit.privacy_statement()


def test_garbage_msgpack_names_the_format():
    with pytest.raises(SpecError, match="^spec is not valid msgpack: "):
        CollectionSpec.from_msgpack(b"\xc1")
    assert CollectionSpec.from_msgpack(msgpack.packb(BASE)) == table_1_spec()


def test_gaussian_inputs_are_class_hiding_values_and_squares_worked_by_hand():
    prep = Preparation([ContinuousFeature("h", 0.0, 1.0), ContinuousFeature("w", -2.0, 2.0)])
    X = np.array([[0.75, -1.0], [0.0, 2.0]])  # prepared z = 2(x - low)/(high - low) - 1
    y = ["b", "a"]
    three = CollectionSpec([], ["a", "b"], "DE", 1.0, continuous=prep, model="gaussian", approach=3)
    labels, h, h2, w, w2 = population_inputs(three, X, y)
    assert labels.tolist() == [1, 0]
    assert h.tolist() == [[0.0, 0.5], [-1.0, 0.0]] and h2.tolist() == [[0.0, 0.25], [1.0, 0.0]]
    assert w.tolist() == [[0.0, -0.5], [1.0, 0.0]] and w2.tolist() == [[0.0, 0.25], [1.0, 0.0]]
    one = CollectionSpec([], ["a", "b"], "DE", 1.0, continuous=prep, model="gaussian", approach=1)
    labels, values, squares = population_inputs(one, X, y)
    # Coordinate-major: (h at a, h at b, w at a, w at b).
    assert values.tolist() == [[0.0, 0.5, 0.0, -0.5], [-1.0, 0.0, 1.0, 0.0]]
    assert squares.tolist() == [[0.0, 0.25, 0.0, 0.25], [1.0, 0.0, 1.0, 0.0]]


def test_record_refusals_word_for_word():
    spec = table_1_spec()
    cases = [
        (lambda: encode_record({**RECORD, "age": "Ancient"}, spec),
         "age: unknown value 'Ancient'; expected one of ['Young', 'Medium', 'Old']"),
        (lambda: encode_features(np.array([["Young", "Low"]], dtype=object), spec),
         "features: expected a table with 3 columns, got shape (1, 2)"),
        (lambda: encode_features(np.array(["Young", "Low", "Male"], dtype=object), spec),
         "features: expected a table with 3 columns, got shape (3,)"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(RecordError) as refused:
            call()
        assert str(refused.value) == message
    # Labels given as a column (m, 1) are read like a flat list.
    assert encode_labels(np.array([["No"], ["Yes"]]), spec).tolist() == [1, 0]
    codes = encode_features(np.array([["Old", "High", "Female"], ["Young", "Low", "Male"]], dtype=object), spec)
    assert codes.dtype == np.int64 and codes.tolist() == [[2, 2, 1], [0, 0, 0]]


def test_the_spec_passes_its_threshold_to_every_oracle_and_reads_versionless_specs():
    spec = table_1_spec(protocol="THE", theta=0.4)
    assert [o.theta for o in spec.oracles] == [0.4] * spec.n_inputs
    unversioned = {k: v for k, v in table_1_spec().to_dict().items() if k != "version"}
    assert CollectionSpec.from_dict(unversioned) == table_1_spec()
    with pytest.raises(SpecError) as refused:
        CollectionSpec.from_dict({**BASE, "features": [1]})
    assert str(refused.value) == "features must be a list of {name, categories} mappings"
    # Values are quoted whole up to 40 characters, then cut to 37 and an ellipsis.
    for text, shown in [("a" * 38, "'" + "a" * 38 + "'"), ("a" * 39, "'" + "a" * 36 + "...")]:
        with pytest.raises(SpecError) as refused:
            CollectionSpec.from_dict({**BASE, "epsilon": text})
        assert str(refused.value) == f"epsilon must be a number from 0.001 to 50, got {shown}"


def test_a_device_reads_a_published_the_spec_only_with_its_threshold_stated():
    """An operator may leave THE's threshold out (the service resolves and publishes it); a device
    reading what a service published refuses a THE spec without it, as participant-js does: a
    device that filled in its own would answer a spec the other refuses."""
    operator = {**table_1_spec(protocol="THE").to_dict(), "theta": None}
    assert CollectionSpec.from_dict(operator).theta is not None
    for theta in (None, "absent"):
        published = {k: v for k, v in operator.items() if theta is None or k != "theta"}
        with pytest.raises(SpecError, match="a THE spec must state theta"):
            CollectionSpec.published(published)
    assert CollectionSpec.published({**operator, "theta": 0.4}).theta == 0.4
    assert CollectionSpec.published({**table_1_spec(protocol="SHE").to_dict(), "theta": None}).protocol == "SHE"


def test_an_unknown_value_is_named_wherever_it_sorts_and_whichever_row_holds_it():
    spec = table_1_spec()
    X = np.array([["Old", "High", "Female"], ["Zebra", "Low", "Male"]], dtype=object)
    with pytest.raises(RecordError) as refused:
        encode_features(X, spec)
    assert str(refused.value) == "age: unknown value 'Zebra'; expected one of ['Young', 'Medium', 'Old']"


def test_gaussian_inputs_are_named_for_what_they_carry():
    prep = Preparation([ContinuousFeature("h", 0.0, 1.0)])
    names = {
        a: CollectionSpec([], ["a", "b"], "DE", 1.0, continuous=prep, model="gaussian", approach=a).input_names
        for a in (1, 2, 3)
    }
    assert names == {
        1: ("class", "values", "squares"),
        2: ("class", "values", "squares"),
        3: ("class", "h:value", "h:square"),
    }


def test_the_privacy_statement_names_the_protocol_each_input_uses():
    """``auto`` is resolved per input: the statement says which protocol serves which input
    ("one auto report" told a person nothing)."""
    from sim.datasets import load_dataset
    from sim.experiment import spec_for

    car = spec_for(load_dataset("car"), "auto", 0.5)
    assert "one report (DE for class; OUE for buying, maint, doors, persons, lug_boot, safety)" in car.privacy_statement()
    assert "Each person sends one DE report" in table_1_spec(protocol="auto").privacy_statement()
    assert "auto" not in car.privacy_statement() and "7 reports (DE for class; OUE" in spec_for(
        load_dataset("car"), "auto", 0.5, budget="split"
    ).privacy_statement()


def test_a_wide_records_fields_are_checked_in_time_linear_in_them():
    """The unknown-field check looks each key up in a set: the comparisons it makes on a record's
    keys grow with the fields, a few per field (a scan of the field list per key made one per pair,
    12.5 million here, and minutes at the 55,001 fields the default limits admit). Counted, not
    timed against a clock a loaded machine can break."""
    compared = [0]

    class Key(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            compared[0] += 1
            return str.__eq__(self, other)

    fields = 5_000
    spec = CollectionSpec([Feature(f"f{j}", ["0", "1"]) for j in range(fields)], ["a", "b"], "DE", 1.0)
    record = {**{Key(f.name): "1" for f in spec.features}, Key("class"): "a"}
    Participant(spec).validate(record)
    assert 0 < compared[0] <= 10 * (fields + 1), compared[0]
