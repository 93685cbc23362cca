"""RSA blind signatures, RSABSSA-SHA384-PSS-Deterministic (RFC 9474): the signer signs a message it
never sees, and the signature verifies as an ordinary RSASSA-PSS signature (SHA-384, MGF1-SHA-384,
a 48-byte salt) that the signer cannot tie to the signing.

Keys, the PSS verification and the randomness come from ``cryptography`` and the operating
system; what is written here is RFC 9474's own arithmetic, checked against its test vectors
(``tests/test_blind_rsa.py``):

- the client: :func:`blind` (EMSA-PSS encoding of the message with a fresh salt, then ``m·r^e mod
  n`` for a fresh ``r``) and :func:`finalize` (``s·r⁻¹ mod n``, then the signature verified by
  ``cryptography`` before it is kept);
- the signer: :func:`blind_sign` (``m^d mod n`` with the base blinded by a fresh ``u``, as OpenSSL
  blinds every private operation, so that its time does not follow the message a client chose,
  and the result checked against the public key before it leaves: a faulty result would give the
  key away).

Needs ``cryptography`` (the ``sealing`` extra, as sealing does).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from functools import lru_cache

from .errors import ParticipantError

HASH = hashlib.sha384
HASH_BYTES = 48  # SHA-384
SALT_BYTES = 48  # the PSS variant's salt: as long as the hash
#: The smallest modulus a key may have, in bits (Privacy Pass's tokens use 2048).
MIN_BITS = 2048


class BlindSignatureError(ParticipantError):
    """A blind signature step refused its input: a message or signature of the wrong length or out
    of range, a key that is not RSA or too short, or a signature that does not verify."""


def _public_numbers(key):
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not isinstance(key, rsa.RSAPublicKey):
        raise BlindSignatureError("the issuing key is not an RSA public key")
    numbers = key.public_numbers()
    if numbers.n.bit_length() < MIN_BITS:
        raise BlindSignatureError(f"the issuing key has {numbers.n.bit_length()} bits; at least {MIN_BITS} are needed")
    return numbers.n, numbers.e


def modulus_bytes(key) -> int:
    """The length in bytes of ``key``'s modulus: of a blinded message, a blind signature and a signature."""
    n, _ = _public_numbers(key)
    return (n.bit_length() + 7) // 8


def _mgf1(seed: bytes, length: int) -> bytes:
    out, counter = b"", 0
    while len(out) < length:
        out += HASH(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return out[:length]


def pss_encode(message: bytes, em_bits: int, salt: bytes) -> bytes:
    """EMSA-PSS-ENCODE (RFC 8017, 9.1.1) of ``message`` with SHA-384, MGF1-SHA-384 and ``salt``,
    to ``em_bits`` bits: the encoded message, ``ceil(em_bits / 8)`` bytes."""
    em_len = (em_bits + 7) // 8
    if em_len < HASH_BYTES + len(salt) + 2:
        raise BlindSignatureError("the key is too short for SHA-384 PSS")
    m_hash = HASH(message).digest()
    h = HASH(b"\x00" * 8 + m_hash + salt).digest()
    db = b"\x00" * (em_len - len(salt) - HASH_BYTES - 2) + b"\x01" + salt
    masked = bytes(a ^ b for a, b in zip(db, _mgf1(h, em_len - HASH_BYTES - 1)))
    first = masked[0] & (0xFF >> (8 * em_len - em_bits))
    return bytes([first]) + masked[1:] + h + b"\xbc"


def blind(key, message: bytes, salt: bytes | None = None, r: int | None = None) -> tuple[bytes, int]:
    """Blind ``message`` for the holder of ``key``'s private half: ``(blinded message, inverse)``,
    the blinded message ``modulus_bytes(key)`` long and the inverse of the blind, kept for
    :func:`finalize`. ``salt`` and ``r`` are drawn fresh unless given (the RFC's test vectors
    give them)."""
    n, e = _public_numbers(key)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    encoded = pss_encode(message, n.bit_length() - 1, salt)
    m = int.from_bytes(encoded, "big")
    if math.gcd(m, n) != 1:
        raise BlindSignatureError("the encoded message shares a factor with the modulus")
    while r is None:
        candidate = secrets.randbelow(n - 2) + 2
        if math.gcd(candidate, n) == 1:
            r = candidate
    inverse = pow(r, -1, n)
    blinded = (m * pow(r, e, n)) % n
    return blinded.to_bytes(modulus_bytes(key), "big"), inverse


def blind_sign(private_key, blinded: bytes) -> bytes:
    """The signer's step: ``blinded^d mod n`` (``modulus_bytes`` long), the base blinded by a
    fresh ``u`` (``(blinded·u^e)^d · u⁻¹``) so that the private operation's time does not follow
    the message, and the result checked (``s^e = blinded``) before it is returned."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not isinstance(private_key, rsa.RSAPrivateKey):
        raise BlindSignatureError("the issuing key is not an RSA private key")
    n, e = _public_numbers(private_key.public_key())
    size = modulus_bytes(private_key.public_key())
    if not isinstance(blinded, bytes) or len(blinded) != size:
        raise BlindSignatureError(f"a blinded message is {size} bytes")
    m = int.from_bytes(blinded, "big")
    if not 0 < m < n:
        raise BlindSignatureError("the blinded message is not below the modulus")
    numbers = private_key.private_numbers()
    while True:
        u = secrets.randbelow(n - 2) + 2
        if math.gcd(u, n) == 1:
            break
    base = (m * pow(u, e, n)) % n
    # CRT: two half-size exponentiations, recombined with Garner's formula.
    sp = pow(base % numbers.p, numbers.dmp1, numbers.p)
    sq = pow(base % numbers.q, numbers.dmq1, numbers.q)
    s = (sq + numbers.q * ((numbers.iqmp * (sp - sq)) % numbers.p)) % n
    s = (s * pow(u, -1, n)) % n
    if pow(s, e, n) != m:
        raise BlindSignatureError("the signing step failed its check; nothing was returned")
    return s.to_bytes(size, "big")


def finalize(key, message: bytes, blind_signature: bytes, inverse: int) -> bytes:
    """The client's last step: the signature of ``message`` (``modulus_bytes`` long) from the
    signer's ``blind_signature`` and the blind's ``inverse``, verified under ``key`` (RSASSA-PSS,
    SHA-384, 48-byte salt) before it is returned; :class:`BlindSignatureError` when it does not."""
    n, _ = _public_numbers(key)
    size = modulus_bytes(key)
    if not isinstance(blind_signature, bytes) or len(blind_signature) != size:
        raise BlindSignatureError(f"a blind signature is {size} bytes")
    z = int.from_bytes(blind_signature, "big")
    if not 0 < z < n:
        raise BlindSignatureError("the blind signature is not below the modulus")
    signature = ((z * inverse) % n).to_bytes(size, "big")
    if not verify(key, message, signature):
        raise BlindSignatureError("the signature does not verify under the issuing key")
    return signature


def verify(key, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``key``'s RSASSA-PSS signature (SHA-384, MGF1-SHA-384, 48-byte
    salt) of ``message`` (``cryptography`` checks it)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not isinstance(key, rsa.RSAPublicKey):
        raise BlindSignatureError("the issuing key is not an RSA public key")
    pss, sha384 = _pss()
    try:
        key.verify(signature, message, pss, sha384)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


@lru_cache(maxsize=1)
def _pss():
    """The PSS padding and hash objects every verification uses (built once: building them took
    about a third of a verification's time)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=SALT_BYTES), hashes.SHA384()
