"""The wire format's refusals: each bad report gets its reason code (a metrics label) and a message
that names the field, the bound and the value, exactly; and what passes decodes to exact rows."""

import struct

import msgpack
import numpy as np
import pytest

from participant.wire import (
    ReportError,
    check_payload,
    check_report,
    decode_payload,
    decode_values,
    encode_payload,
    unpack,
)
from protocols.noise import GRID

from .conftest import table_1_spec

ID = bytes(range(16))
DE, OUE, SHE = (table_1_spec(protocol=p) for p in ("DE", "OUE", "SHE"))  # inputs of sizes 2, 6, 6, 4


SAME = object()  # stands for the digest of the spec under test


def report(**fields):
    return {"id": ID, "spec": SAME, "input": 3, "value": 1} | fields


def for_spec(spec, obj):
    """``obj`` with the :data:`SAME` placeholder replaced by ``spec``'s digest."""
    return {k: spec.fingerprint_digest if v is SAME else v for k, v in obj.items()} if isinstance(obj, dict) else obj


@pytest.mark.parametrize("spec, obj, reason, message", [
    (DE, [ID, 3, 1], "wrong_type", "a report must be a map with keys id, spec, input, value"),
    (DE, report(x=1), "malformed", "unknown report fields: x"),
    (DE, report(b=1, a=2, token="t"), "malformed", "unknown report fields: a, b"),
    (DE, {"spec": SAME, "input": 3, "value": 1}, "malformed", "report is missing 'id'"),
    (DE, {"id": ID, "input": 3, "value": 1}, "malformed", "report is missing 'spec'"),
    (DE, {"id": ID, "spec": SAME, "value": 1}, "malformed", "report is missing 'input'"),
    (DE, {"id": ID, "spec": SAME, "input": 3}, "malformed", "report is missing 'value'"),
    (DE, {"id": ID, "spec": SAME, "input": 3, "token": "t"}, "malformed", "report is missing 'value'"),
    (DE, report(spec=b"\0" * 31), "wrong_type", "spec must be the 32-byte SHA-256 digest of the collection's spec"),
    (DE, report(spec=OUE.fingerprint), "wrong_type", "spec must be the 32-byte SHA-256 digest of the collection's spec"),
    (DE, report(spec=OUE.fingerprint_digest), "wrong_spec",
     (f"this report was built for another spec (fingerprint {OUE.fingerprint[:16]}…, the collection's is "
     f"{DE.fingerprint[:16]}…); nothing was stored")),
    (DE, report(id=ID[:15]), "wrong_type", "id must be 16 random bytes"),
    (DE, report(id="0123456789abcdef"), "wrong_type", "id must be 16 random bytes"),
    (DE, report(input=True), "wrong_type", "input must be an integer"),
    (DE, report(input="3"), "wrong_type", "input must be an integer"),
    (DE, report(input=4), "out_of_range", "input must lie in [0, 3], got 4"),
    (DE, report(input=-1), "out_of_range", "input must lie in [0, 3], got -1"),
    (DE, report(value=4), "out_of_range", "value of input 3 must lie in [0, 3], got 4"),
    (DE, report(value=-1), "out_of_range", "value of input 3 must lie in [0, 3], got -1"),
    (DE, report(input=1, value=6), "out_of_range", "value of input 1 must lie in [0, 5], got 6"),
    (DE, report(value=True), "wrong_type", "value of input 3 must be an integer"),
    (DE, report(value=b"\x01"), "wrong_type", "value of input 3 must be an integer"),
    (OUE, report(input=1, value=1), "wrong_type", "value of input 1 must be bytes (bits)"),
    (OUE, report(input=1, value=b"\0\0"), "wrong_length", "value of input 1 must be 1 bytes (6 bits), got 2"),
    (SHE, report(input=2, value=b"\0" * 8), "wrong_length", "value of input 2 must be 48 bytes (6 float64), got 8"),
    (SHE, report(input=2, value=1.0), "wrong_type", "value of input 2 must be bytes (floats)"),
])  # fmt: skip
def test_each_refusal_has_its_reason_and_names_field_bound_and_value(spec, obj, reason, message):
    with pytest.raises(ReportError) as refused:
        check_report(spec, for_spec(spec, obj))
    assert (refused.value.reason, str(refused.value)) == (reason, message)


@pytest.mark.parametrize("spec, obj", [
    (DE, report()),
    (DE, report(value=3)),
    (DE, report(input=0, value=0)),
    (DE, report(token="enrolment token")),
    (OUE, report(input=1, value=b"\xfc")),
    (SHE, report(input=0, value=b"\0" * 16)),
])  # fmt: skip
def test_valid_reports_pass_unchanged(spec, obj):
    obj = for_spec(spec, obj)
    assert check_report(spec, obj) == (obj["id"], obj["input"], obj["value"])


def test_a_report_built_for_a_reordered_spec_of_the_same_shape_is_refused():
    from participant import CollectionSpec, Participant
    from participant.wire import pack_report

    spec = table_1_spec(protocol="OUE")
    data = spec.to_dict()
    data["features"][0]["categories"] = data["features"][0]["categories"][::-1]  # same sizes, other meaning
    reordered = CollectionSpec.from_dict(data)
    assert [o.state_size for o in reordered.oracles] == [o.state_size for o in spec.oracles]
    record = dict(zip(["age", "income", "gender", "missed_payment"], ["Young", "Low", "Male", "No"]))
    body = msgpack.unpackb(pack_report(Participant(spec).report(record), spec))
    assert check_report(spec, body)[0] == body["id"]
    with pytest.raises(ReportError) as refused:
        check_report(reordered, body)
    assert refused.value.reason == "wrong_spec"


def test_index_payloads_decode_with_every_out_of_range_value_refused():
    oracle = DE.oracles[1]  # d = 6
    rows, bad, message = decode_values(oracle, [0, 5, 6, -1, 2**70, 3], 1)
    assert rows.dtype == np.int64 and rows.tolist() == [0, 5, 0, 0, 0, 3]
    assert bad.tolist() == [False, False, True, True, True, False]
    assert message == "value of input 1 must be an integer in [0, 5]"
    assert decode_payload(oracle, 5, 1) == 5
    for value, refused in zip([0, 5, 6, -1, 2**70, 3], bad):  # the single-report check refuses the same ones
        if refused:
            with pytest.raises(ReportError, match=r"must lie in \[0, 5\]"):
                check_payload(oracle, value, 1)
        else:
            check_payload(oracle, value, 1)


def test_bit_payloads_decode_most_significant_bit_first_and_refuse_padding():
    oracle = OUE.oracles[1]  # d = 6: one byte, two padding bits
    rows, bad, message = decode_values(oracle, [b"\x80", b"\xfc", b"\x01", b"\x02", b"\x04"], 1)
    assert rows.dtype == bool and rows.shape == (5, 6)
    assert rows[0].tolist() == [1, 0, 0, 0, 0, 0] and rows[1].all() and rows[4].tolist() == [0, 0, 0, 0, 0, 1]
    assert bad.tolist() == [False, False, True, True, False]
    assert message == "value of input 1 sets padding bits beyond bit 6"
    with pytest.raises(ReportError) as refused:
        decode_payload(oracle, b"\x01", 1)
    assert (refused.value.reason, str(refused.value)) == ("out_of_range", message)


@pytest.mark.parametrize("d", [2, 6, 8, 9, 16, 17, 64])
def test_one_bit_payload_decodes_as_the_batch_decoder_decodes_it(d):
    """Every byte string of a d-bit payload's length drawn at random, a quarter of them with a
    padding bit set: the single-report decoder gives the batch decoder's row, dtype and
    refusal for each, and the single-report check (the service's, which leaves the decoding to
    the store) refuses the same ones."""
    from protocols import OptimisedUnaryEncoding

    oracle = OptimisedUnaryEncoding(1.0, d)
    rng = np.random.default_rng(d)
    length = -(-d // 8)
    payloads = [rng.integers(0, 256, length, dtype=np.uint8).tobytes() for _ in range(400)]
    rows, bad, message = decode_values(oracle, payloads, 3)
    assert 0 < bad.sum() < len(payloads) or d % 8 == 0
    for payload, row, refused in zip(payloads, rows, bad):
        if refused:
            with pytest.raises(ReportError, match=message):
                decode_payload(oracle, payload, 3)
            with pytest.raises(ReportError, match=message):
                check_payload(oracle, payload, 3)
        else:
            single = decode_payload(oracle, payload, 3)
            assert single.dtype == row.dtype and single.tolist() == row.tolist()
            check_payload(oracle, payload, 3)


def test_float_payloads_must_be_finite_grid_points_within_the_bound():
    oracle = SHE.oracles[0]  # d = 2, bound 2001
    limit = oracle.wire_bound
    pairs = [
        (1.0, -0.5),
        (limit, -limit),
        (limit + GRID, 0.0),
        (np.inf, 0.0),
        (np.nan, 0.0),
        (0.1, 0.0),
        (GRID, 0.0),
    ]
    rows, bad, message = decode_values(oracle, [struct.pack("<2d", *p) for p in pairs], 0)
    assert rows.dtype == np.float64 and rows[:2].tolist() == [
        [1.0, -0.5],
        [limit, -limit],
    ]
    assert bad.tolist() == [False, False, True, True, True, True, False]
    assert message == "value of input 0 must hold finite multiples of 2^-10 (the release grid) of magnitude <= 2001"
    with pytest.raises(ReportError, match="value of input 0 must hold finite"):
        decode_payload(oracle, struct.pack("<2d", np.inf, 0.0), 0)
    for pair, refused in zip(pairs, bad):  # the single-report check refuses the same ones
        if refused:
            with pytest.raises(ReportError, match="value of input 0 must hold finite"):
                check_payload(oracle, struct.pack("<2d", *pair), 0)
        else:
            check_payload(oracle, struct.pack("<2d", *pair), 0)


def test_payloads_encode_to_the_documented_bytes():
    assert encode_payload(OUE.oracles[1], [1, 0, 1, 0, 0, 1]) == b"\xa4"
    assert encode_payload(SHE.oracles[0], [1, 2]) == struct.pack("<2d", 1.0, 2.0)
    assert encode_payload(DE.oracles[1], np.int64(4)) == 4 and type(encode_payload(DE.oracles[1], np.int64(4))) is int


def test_unpack_decodes_strings_and_refuses_non_string_keys_and_garbage():
    assert unpack(msgpack.packb({"a": "b", "c": b"d"})) == {"a": "b", "c": b"d"}
    for body, why in [
        (msgpack.packb({1: 2}), "a map key that is not a string"),
        (b"\xc1", "a byte no msgpack value begins with"),
        (b"\x92\x01", "truncated"),
        (b"\x91" * 100_000 + b"\x00", "nested too deeply"),
        (msgpack.packb(1) + b"\x01", "data after its end"),
    ]:
        with pytest.raises(ReportError) as refused:
            unpack(body)
        assert refused.value.reason == "malformed"
        # What was wrong, in words: never a library's exception name.
        assert str(refused.value) == f"body is not valid msgpack ({why})", str(refused.value)


def test_integers_beyond_64_bits_are_refused_not_overflowed():
    oracle = DE.oracles[1]  # d = 6
    values = [2**63, 2**64 - 1, -(2**63) - 1, -(2**63), 2**63 - 1, 5]
    rows, bad, _ = decode_values(oracle, values, 1)
    assert bad.tolist() == [True] * 5 + [False] and rows[-1] == 5
    with pytest.raises(ReportError) as refused:
        decode_payload(OUE.oracles[1], b"\0\0", 1)  # checked before decoding
    assert refused.value.reason == "wrong_length"
