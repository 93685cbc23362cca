"""Anonymous tokens for shuffled collections that take reports only from enrolled people: Privacy
Pass's publicly verifiable tokens (RFC 9577 and 9578, token type 2, RSABSSA-SHA384-PSS-
Deterministic blind signatures, :mod:`participant.blind_rsa`), in one profile:

- **The issuing key** is the collection's own RSA key (2048 bits or more), published in its spec
  (``shuffle.issuer_key``, DER SubjectPublicKeyInfo), so the view the shuffler pins holds it: one
  key for everyone. ``token_key_id`` is the SHA-256 of that DER.
- **The challenge** (RFC 9577's TokenChallenge): ``token_type`` 2, ``issuer_name`` ``"ldpnb"``,
  ``redemption_context`` the view's digest (32 bytes), ``origin_info`` the collection's id. A token
  carries its SHA-256, so a token of another collection or view is not one of this.
- **The token input** (RFC 9578, 6.1): ``token_type ‖ nonce ‖ challenge digest ‖ token_key_id``,
  the nonce being ``SHA-256("ldpnb token nonce v1" ‖ sealed report)``: a token is bound to the one
  sealed report it was issued for and cannot be moved to another.
- **Issuance**: the device blinds the token input (:func:`token_request`, RFC 9578's TokenRequest:
  ``token_type ‖ truncated token_key_id ‖ blinded message``), the issuer signs it blind, the device
  unblinds and checks the signature under the view's key (:func:`finish`) before keeping the
  token; **redemption**: the device sends the sealed report with its token behind it, and the
  shuffler checks it (:func:`check`) before it stores the report, then strips it. The aggregator
  never sees a token: the shuffler's dummies carry none, and nothing tells them from people's.

The issuer sees a blinded message and a one-time code, never the token input; a token it later
met (it never does) would verify under its key without telling which issuance made it.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from functools import lru_cache

from . import blind_rsa
from .blind_rsa import BlindSignatureError
from .errors import SpecError
from .view import ShuffledView

TOKEN_TYPE = 2
ISSUER_NAME = b"ldpnb"
NONCE_PREFIX = b"ldpnb token nonce v1"
# token_type (2) ‖ nonce (32) ‖ challenge digest (32) ‖ token_key_id (32)
INPUT_BYTES = 2 + 32 + 32 + 32


class TokenError(ValueError):
    """A token that is not this report's: ``reason`` names how (``malformed``, ``another_key``,
    ``another_collection``, ``another_report``, ``forged``), the message says it in words."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode_key(public_key) -> str:
    """A public key as a spec's ``shuffle.issuer_key``: DER SubjectPublicKeyInfo, URL-safe base64
    without padding."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(der).rstrip(b"=").decode()


@lru_cache(maxsize=256)
def _key(text: str):
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_der_public_key(_b64decode(text))
    except (ValueError, TypeError):
        raise SpecError("the collection's issuing key is not a DER public key; refusing to report") from None
    try:
        blind_rsa.modulus_bytes(key)
    except BlindSignatureError as exc:
        raise SpecError(f"{exc}; refusing to report") from None
    return key


def issuer_of(view: ShuffledView) -> str:
    """The view's ``issuer_key`` text; :class:`SpecError` when its collection takes no tokens."""
    text = view.spec.shuffle.issuer_key if view.spec.shuffle is not None else None
    if text is None:
        raise SpecError(f"collection {view.collection!r} takes no tokens")
    return text


def issuing_key(issuer_key: str):
    """The issuing key a spec's ``issuer_key`` names (``cryptography``'s RSA public key);
    :class:`SpecError` when it is not an RSA key of at least 2048 bits."""
    return _key(issuer_key)


@lru_cache(maxsize=256)
def key_id(issuer_key: str) -> bytes:
    """``token_key_id``: the SHA-256 of the issuing key's DER SubjectPublicKeyInfo (32 bytes)."""
    _key(issuer_key)
    return hashlib.sha256(_b64decode(issuer_key)).digest()


def challenge(view: ShuffledView) -> bytes:
    """The collection's TokenChallenge (RFC 9577, 2.1.1), as bytes."""
    origin = view.collection.encode()
    return (
        struct.pack(">H", TOKEN_TYPE) + struct.pack(">H", len(ISSUER_NAME)) + ISSUER_NAME
        + bytes([len(view.digest)]) + view.digest + struct.pack(">H", len(origin)) + origin
    )  # fmt: skip


_PROFILES: dict[bytes, tuple] = {}


def _profile(view: ShuffledView) -> tuple[object, int, bytes]:
    """The view's issuing key, a token's length, and what every token input of the view ends with
    after its nonce (``challenge digest ‖ token_key_id``), worked out once per view (its digest
    binds all of them)."""
    found = _PROFILES.get(view.digest)
    if found is None:
        issuer = issuer_of(view)
        key = issuing_key(issuer)
        found = key, INPUT_BYTES + blind_rsa.modulus_bytes(key), hashlib.sha256(challenge(view)).digest() + key_id(issuer)
        if len(_PROFILES) >= 1024:
            _PROFILES.clear()
        _PROFILES[view.digest] = found
    return found


def token_length(view: ShuffledView) -> int:
    """Bytes of a token of the view's collection: the token input and the signature."""
    return _profile(view)[1]


def token_input(view: ShuffledView, sealed: bytes) -> bytes:
    """What the issuer signs blind for the report ``sealed`` (see the module's text)."""
    nonce = hashlib.sha256(NONCE_PREFIX + sealed).digest()
    return struct.pack(">H", TOKEN_TYPE) + nonce + _profile(view)[2]


def token_request(view: ShuffledView, sealed: bytes) -> tuple[bytes, int]:
    """A TokenRequest for the report ``sealed`` (RFC 9578, 6.1: ``token_type ‖ truncated
    token_key_id ‖ blinded message``) and the blind's inverse, which :func:`finish` needs."""
    issuer = issuer_of(view)
    blinded, inverse = blind_rsa.blind(issuing_key(issuer), token_input(view, sealed))
    return struct.pack(">H", TOKEN_TYPE) + key_id(issuer)[-1:] + blinded, inverse


def read_request(issuer_key: str, request: bytes) -> bytes:
    """The blinded message of a TokenRequest to the issuing key ``issuer_key``; :class:`TokenError`
    (``malformed`` or ``another_key``) for one that is not."""
    size = blind_rsa.modulus_bytes(issuing_key(issuer_key))
    if not isinstance(request, bytes) or len(request) != 3 + size:
        raise TokenError("malformed", f"a token request is {3 + size} bytes: its type, key and blinded message")
    if request[:2] != struct.pack(">H", TOKEN_TYPE):
        raise TokenError("malformed", f"a token request of type {int.from_bytes(request[:2], 'big')}; this issues type 2")
    if request[2:3] != key_id(issuer_key)[-1:]:
        raise TokenError("another_key", "the token request names another issuing key than the collection's")
    return request[3:]


def finish(view: ShuffledView, sealed: bytes, response: bytes, inverse: int) -> bytes:
    """The token for the report ``sealed`` from the issuer's TokenResponse (its blind signature)
    and the blind's ``inverse``, checked under the view's key before it is returned (an issuer
    signing with any other key is refused here: :class:`BlindSignatureError`)."""
    message = token_input(view, sealed)
    return message + blind_rsa.finalize(issuing_key(issuer_of(view)), message, response, inverse)


def check(view: ShuffledView, sealed: bytes, token: bytes) -> None:
    """Return when ``token`` is a token the view's issuing key issued for the report ``sealed``;
    raise :class:`TokenError` saying how it is not."""
    key, length, _ = _profile(view)
    if not isinstance(token, bytes) or len(token) != length:
        raise TokenError("malformed", f"a token of this collection is {length} bytes")
    if token[:2] != struct.pack(">H", TOKEN_TYPE):
        raise TokenError("malformed", "the token is not of type 2")
    expected = token_input(view, sealed)
    if token[66:98] != expected[66:98]:
        raise TokenError("another_key", "the token was issued under another key than the collection's")
    if token[34:66] != expected[34:66]:
        raise TokenError("another_collection", "the token was issued for another collection or view")
    if token[2:34] != expected[2:34]:
        raise TokenError("another_report", "the token was issued for another report")
    if not blind_rsa.verify(key, token[:INPUT_BYTES], token[INPUT_BYTES:]):
        raise TokenError("forged", "the token's signature does not verify under the collection's issuing key")
