"""strict=True: a record holding a key its spec does not know, lacking a field, or holding a value
it does not declare is refused before anything is drawn, the ledger touched or sent; by default
such a record is reported as before, a value that differs from a declared one only in case warned
of ("did you mean 'Young'?")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from participant import AsyncClient, Client, Participant, RecordError, UnknownFields, UnknownValues
from participant.continuous import ContinuousFeature, Preparation
from participant.spec import CollectionSpec

from .conftest import table_1_spec
from .test_service import sqlite_service  # noqa: F401 (the fixture)

GOOD = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "Yes"}


def untouched(rng: np.random.Generator, state: dict) -> bool:
    return rng.bit_generator.state == state


@pytest.mark.parametrize(
    "record, words",
    [
        ({**GOOD, "Age": "Young"}, ["Age: not a field of this spec", "strict: nothing drawn or sent"]),
        ({**GOOD, "age": "young"}, ["age: 'young' is not declared: did you mean 'Young'?", "nothing drawn"]),
        ({**GOOD, "age": "Ancient"}, ["age: 'Ancient' is not declared: expected one of 'Young', 'Medium', 'Old'"]),
        ({**GOOD, "missed_payment": "yes"}, ["missed_payment: 'yes' is not declared: did you mean 'Yes'?"]),
        ({k: v for k, v in GOOD.items() if k != "income"}, ["income: missing: expected one of"]),
        ({**GOOD, "gender": None}, ["gender: missing"]),
    ],
)
def test_strict_refuses_before_anything_is_drawn(record, words):
    spec = table_1_spec(protocol="OUE")
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(RecordError) as refused:
        Participant(spec, rng=rng, strict=True).report(record)
    for word in words:
        assert word in str(refused.value), refused.value
    assert untouched(rng, state)
    # By default the same record is reported; nothing refused.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert Participant(spec, rng=rng).report(record).input in range(spec.n_inputs)


def test_strict_refuses_an_undeclared_number_and_a_per_input_record():
    spec = CollectionSpec(
        [], ["a", "b"], "DE", 1.0, continuous=Preparation([ContinuousFeature("x", 0, 1)], bins=2), label="y"
    )
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    for value in (float("nan"), "0.5", None):
        with pytest.raises(RecordError, match="x: .*expected a finite number; strict"):
            Participant(spec, rng=rng, strict=True).report({"x": value, "y": "a"})
    assert untouched(rng, state)
    assert Participant(spec, rng=rng, strict=True).report({"x": 0.5, "y": "a"}).input in (0, 1)
    split = table_1_spec(protocol="OUE", budget="split")
    with pytest.raises(RecordError, match="age"):
        Participant(split, strict=True).reports({**GOOD, "age": "young"})
    assert len(Participant(split, strict=True).reports(GOOD)) == split.n_inputs


def test_by_default_a_wrong_case_value_is_warned_of_and_reported_as_before():
    spec = table_1_spec(protocol="OUE")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a declared record: no warning
        Participant(spec).report(GOOD)
        Participant(spec).report({**GOOD, "age": "Ancient"})  # a person's value the spec left out: not the app's bug
    with pytest.warns(UnknownValues, match=r"the record's 'age' is 'young'.*did you mean 'Young'\?"):
        Participant(spec).report({**GOOD, "age": "young"})
    with pytest.warns(UnknownFields, match="'Age'"):
        Participant(spec).report({**GOOD, "Age": "Young"})
    # The draws are those of the same record with the value left out: nothing depends on the case.
    left_out = {**GOOD, "age": "Ancient"}
    with pytest.warns(UnknownValues):
        wrong = Participant(spec, rng=np.random.default_rng(5)).report({**GOOD, "age": "young"})
    same = Participant(spec, rng=np.random.default_rng(5)).report(left_out)
    assert wrong.input == same.input and np.array_equal(wrong.payload, same.payload)


async def test_a_strict_client_sends_nothing_and_leaves_the_ledger_untouched(sqlite_service, tmp_path):  # noqa: F811
    service = sqlite_service
    await service.create(table_1_spec(protocol="OUE"), "strict")
    ledger = tmp_path / "ledger.json"
    async with AsyncClient(service.url, ledger=ledger, strict=True, pace=0.01, backoff=0.01) as device:
        for record in ({**GOOD, "age": "young"}, {**GOOD, "Age": "Young"}):
            with pytest.raises(RecordError, match="strict: nothing drawn or sent"):
                await device.submit("strict", record)
        assert not ledger.exists() and await service.n_reports("strict") == 0
        assert await device.submit("strict", GOOD) == "accepted"
    assert await service.n_reports("strict") == 1
    assert Client(service.url, ledger=None, strict=True).options["strict"] is True
