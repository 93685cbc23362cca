"""RSA blind signatures (RFC 9474) as written in participant/blind_rsa.py: the RFC's four test
vectors, step by step; a round trip on a fresh key; and every malformed input refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from participant import blind_rsa
from participant.blind_rsa import BlindSignatureError

VECTORS = Path(__file__).resolve().parent / "vectors" / "rfc9474.json"  # RFC 9474, Appendix A (vectors/README.md)


def _vectors() -> list[dict]:
    return json.loads(VECTORS.read_text())


def _keys(v: dict):
    p, q, n, e, d = (int(v[k], 16) for k in ("p", "q", "n", "e", "d"))
    numbers = rsa.RSAPrivateNumbers(
        p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q), rsa.RSAPublicNumbers(e, n)
    )
    private = numbers.private_key()
    return private, private.public_key()


@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["name"])
def test_the_rfcs_vectors_step_by_step(vector):
    private, public = _keys(vector)
    n = public.public_numbers().n
    message = bytes.fromhex(vector["input_msg"])
    blinded, inverse = blind_rsa.blind(public, message, bytes.fromhex(vector["salt"]), pow(int(vector["inv"], 16), -1, n))
    assert inverse == int(vector["inv"], 16)
    assert blinded.hex() == vector["blinded_msg"]
    if "encoded_msg" in vector:
        encoded = blind_rsa.pss_encode(message, n.bit_length() - 1, bytes.fromhex(vector["salt"]))
        assert encoded.hex() == vector["encoded_msg"]
    signed = blind_rsa.blind_sign(private, blinded)
    assert signed.hex() == vector["blind_sig"]
    if vector["sLen"] == "0x30":  # the PSS variants (48-byte salt): finalize verifies as Privacy Pass does
        assert blind_rsa.finalize(public, message, signed, inverse).hex() == vector["sig"]
    else:  # PSSZERO: the same arithmetic, verified with a zero-length salt by the RFC
        assert ((int(signed.hex(), 16) * inverse) % n).to_bytes(len(signed), "big").hex() == vector["sig"]


def test_a_fresh_key_signs_what_it_never_sees_and_the_signature_verifies():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key()
    message = b"a token input"
    blinded, inverse = blind_rsa.blind(public, message)
    assert message not in blinded
    signature = blind_rsa.finalize(public, message, blind_rsa.blind_sign(private, blinded), inverse)
    assert blind_rsa.verify(public, message, signature)
    assert not blind_rsa.verify(public, b"another", signature)
    # Two blindings of one message look nothing alike: the signer cannot tell a repeat.
    assert blind_rsa.blind(public, message)[0] != blind_rsa.blind(public, message)[0]


def test_malformed_inputs_are_refused_with_one_line():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key()
    size = blind_rsa.modulus_bytes(public)
    n = public.public_numbers().n
    for bad in (b"", b"\x00" * (size - 1), b"\x00" * (size + 1), b"\x00" * size, n.to_bytes(size, "big"), "text"):
        with pytest.raises(BlindSignatureError):
            blind_rsa.blind_sign(private, bad)
    _, inverse = blind_rsa.blind(public, b"m")
    with pytest.raises(BlindSignatureError, match="does not verify"):
        blind_rsa.finalize(public, b"m", (12345).to_bytes(size, "big"), inverse)
    with pytest.raises(BlindSignatureError, match="bytes"):
        blind_rsa.finalize(public, b"m", b"\x01" * 10, inverse)
    with pytest.raises(BlindSignatureError, match="not an RSA"):
        blind_rsa.blind(ec.generate_private_key(ec.SECP256R1()).public_key(), b"m")
    with pytest.raises(BlindSignatureError, match="at least 2048"):
        blind_rsa.blind(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key(), b"m")
    assert not blind_rsa.verify(public, b"m", b"\x00" * 3)


def test_a_faulty_private_operation_returns_nothing():
    """A signing step that computes a wrong result (a fault in one CRT half gives away the key's
    factors to anyone holding the result) is checked against the public key and refused."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = private.private_numbers()
    faulty = rsa.RSAPrivateNumbers(
        numbers.p, numbers.q, numbers.d, numbers.dmp1 ^ 2, numbers.dmq1, numbers.iqmp, numbers.public_numbers
    )

    class Faulty:  # the key's own numbers, one CRT exponent flipped
        def __init__(self):
            self._key = private

        def public_key(self):
            return private.public_key()

        def private_numbers(self):
            return faulty

    blinded, _ = blind_rsa.blind(private.public_key(), b"m")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rsa, "RSAPrivateKey", (rsa.RSAPrivateKey, Faulty))
        with pytest.raises(BlindSignatureError, match="failed its check"):
            blind_rsa.blind_sign(Faulty(), blinded)
