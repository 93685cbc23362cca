"""Sealed reports: a report the shuffler carries but cannot read, of one length per collection.

A device reporting to a shuffled collection packs the report it would have sent (id, spec digest,
input, value), pads it to the collection's one length, and seals it with HPKE (RFC 9180, base
mode: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM: ``cryptography``'s HPKE) to the
aggregator's public key the spec names, under the collection's view as its shuffler pinned it
(:class:`~participant.view.ShuffledView`). The shuffler stores and forwards the sealed bytes; only
the aggregator opens them. HPKE's ``info`` is ``"ldpnb sealed report v2 "`` followed by the view's
digest (which covers the spec's digest, the collection's id and uid, the batch floor and the
dummies), so a sealed report opens only as a report of the view it was sealed for: not of another
collection with the same spec, nor under a uid or key the aggregator showed one device alone.

Layout: the view's digest (32 bytes, in the clear: the shuffler refuses any other) ‖ ``enc`` (the
32-byte encapsulated key) ‖ the AEAD ciphertext of ``length (4 bytes, big endian) ‖ packed report
‖ zero bytes`` up to :func:`padded_length`, the largest packed report any input of the spec can
produce; so every sealed report of a collection is :func:`sealed_length` bytes, whichever input
it carries and whatever its value.

Sealing needs ``cryptography`` 47 or later (``pip install "ldpnb[sealing]"``; the aggregator's
install has it).
"""

from __future__ import annotations

import struct

import numpy as np

from .errors import SpecError
from .reporting import Report
from .spec import CollectionSpec
from .view import DIGEST_BYTES, ShuffledView
from .wire import REPORT_ID_BYTES, ReportError, pack_report

INFO = b"ldpnb sealed report v2 "
ENC_BYTES = 32  # an X25519 public key
TAG_BYTES = 16  # AES-128-GCM
LENGTH_BYTES = 4


def _hpke():
    """``cryptography``'s HPKE module and its suite for sealed reports; SpecError when missing."""
    try:
        from cryptography.hazmat.primitives import hpke
        from cryptography.hazmat.primitives.asymmetric import x25519
    except ImportError:
        raise SpecError(
            "this collection is shuffled: sealing its reports needs cryptography 47 or later "
            "(pip install 'ldpnb[sealing]'); nothing was sent"
        ) from None
    return hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_128_GCM), x25519


def _largest_payload(oracle):
    """The payload of ``oracle`` whose packed form is longest: the largest index, or any vector."""
    if oracle.wire_kind == "bits":
        return np.zeros(oracle.wire_length, dtype=bool)
    if oracle.wire_kind == "floats":
        return np.zeros(oracle.wire_length)
    return oracle.wire_length - 1  # DE's index, the one-bit mean's 2·j + u


_PADDED: dict[bytes, int] = {}


def padded_length(spec: CollectionSpec) -> int:
    """Bytes of every sealed report's plaintext: the length prefix and the longest packed report
    of any of the spec's inputs."""
    size = _PADDED.get(spec.fingerprint_digest)
    if size is None:
        longest = max(
            len(pack_report(Report(i, _largest_payload(o), bytes(REPORT_ID_BYTES)), spec))
            for i, o in enumerate(spec.oracles)
        )
        size = _PADDED[spec.fingerprint_digest] = LENGTH_BYTES + longest
    return size


def sealed_length(spec: CollectionSpec) -> int:
    """Bytes of every sealed report of a collection of ``spec``: the view's digest, ``enc``, the
    padded report and the AEAD's tag."""
    return DIGEST_BYTES + ENC_BYTES + padded_length(spec) + TAG_BYTES


def pad(packed: bytes, spec: CollectionSpec) -> bytes:
    """``packed`` with its length in front and zeros behind, to :func:`padded_length` bytes."""
    size = padded_length(spec)
    if LENGTH_BYTES + len(packed) > size:
        raise ValueError(f"a packed report of {len(packed)} bytes is longer than any report of its spec")
    return struct.pack(">I", len(packed)) + packed + bytes(size - LENGTH_BYTES - len(packed))


def unpad(padded: bytes) -> bytes:
    """The packed report inside a padded plaintext; raises :class:`ReportError` if it is not one."""
    if len(padded) < LENGTH_BYTES:
        raise ReportError("sealed", "the sealed report holds no report")
    (size,) = struct.unpack(">I", padded[:LENGTH_BYTES])
    body, rest = padded[LENGTH_BYTES : LENGTH_BYTES + size], padded[LENGTH_BYTES + size :]
    if len(body) != size or rest.count(0) != len(rest):
        raise ReportError("sealed", "the sealed report's padding is not a length and zeros")
    return body


def _public_key(spec: CollectionSpec):
    """The sealing suite and the spec's key; SpecError when there is none, or none usable."""
    if spec.shuffle is None or spec.shuffle.key is None:
        raise SpecError("this collection names no key to seal its reports to")
    suite, x25519 = _hpke()
    try:
        return suite, x25519.X25519PublicKey.from_public_bytes(bytes.fromhex(spec.shuffle.key.public_key))
    except ValueError:
        raise SpecError("the collection's sealing key is not an X25519 public key; refusing to report") from None


def check_sealable(spec: CollectionSpec) -> None:
    """Raise :class:`SpecError` unless a device here can seal reports for ``spec``: a shuffler
    URL and a key it can use, and the sealing library."""
    if spec.shuffle is None:
        raise SpecError("this collection is not shuffled")
    spec.shuffle.check_sendable()
    _public_key(spec)


def info(view_digest: bytes) -> bytes:
    """HPKE's ``info`` for reports of the view whose digest is ``view_digest``."""
    return INFO + view_digest


def seal(packed: bytes, view: ShuffledView) -> bytes:
    """The sealed form of the packed report ``packed`` for ``view`` (its spec shuffled, with a
    key): the view's digest ‖ ``enc`` ‖ ciphertext, :func:`sealed_length` bytes. Raises
    :class:`SpecError` when the spec names no key, or sealing's library is missing."""
    suite, public = _public_key(view.spec)
    return view.digest + suite.encrypt(pad(packed, view.spec), public, info=info(view.digest))


def private_key(raw: bytes):
    """The X25519 private key object of the 32 bytes ``raw``: built once per key and kept by the
    caller (building it costs about as much as opening a report)."""
    _, x25519 = _hpke()
    return x25519.X25519PrivateKey.from_private_bytes(raw)


def open_sealed(sealed: bytes, view: ShuffledView, key) -> bytes:
    """The packed report inside ``sealed``, opened with ``key`` (the X25519 private key the spec's
    key names: its 32 bytes, or :func:`private_key`'s object); raises :class:`ReportError`
    ("sealed") for bytes that do not open as a report sealed for ``view`` (another length, view,
    key, spec or collection; tampered)."""
    if isinstance(key, (bytes, bytearray)):
        key = private_key(bytes(key))
    return open_raw(sealed, view.digest, sealed_length(view.spec), key)


def open_raw(sealed: bytes, view_digest: bytes, length: int, key) -> bytes:
    """:func:`open_sealed` given the view's digest, the sealed ``length`` and the key object
    alone: what a process that opens reports needs, without the spec."""
    if not isinstance(sealed, bytes):
        raise ReportError("sealed", "a sealed report is bytes")
    if len(sealed) != length:
        raise ReportError("sealed", f"a sealed report of this collection is {length} bytes, got {len(sealed)}")
    if sealed[:DIGEST_BYTES] != view_digest:
        raise ReportError("sealed", "the sealed report names another view of the collection than its shuffler's")
    suite, _ = _hpke()
    try:
        padded = suite.decrypt(sealed[DIGEST_BYTES:], key, info=info(view_digest))
    except Exception:  # noqa: BLE001 (cryptography raises InvalidTag, ValueError... for every failure to open)
        raise ReportError("sealed", "the sealed report does not open with this collection's key (tampered or misdirected)") from None
    return unpad(padded)


# Private key objects a process has built, by their 32 bytes (see open_many).
_KEYS: dict[bytes, object] = {}


def open_many(raw_key: bytes, view_digest: bytes, length: int, sealed: list) -> list:
    """Every report of ``sealed`` opened (:func:`open_raw`): its packed report, or the
    :class:`ReportError`'s message (a str) for one that does not open. Runs in the service's
    opening processes, each building a key's object once."""
    key = _KEYS.get(raw_key)
    if key is None:
        key = _KEYS[raw_key] = private_key(raw_key)
    out = []
    for item in sealed:
        try:
            out.append(open_raw(item, view_digest, length, key))
        except ReportError as exc:
            out.append(str(exc))
    return out


def new_key_pair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair for sealing: ``(private key, public key)``, 32 bytes each."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    key = X25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    private = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return private, key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
