"""Known-answer vectors from the Python participant, which the JavaScript participant must reproduce.

They are committed as ``participant-js/test/vectors.json`` (so that ``npm test`` runs on its own);
``tests/test_participant_js.py`` checks the file is current, and ``python -m tests.js_vectors``
rewrites it.

A test-only random source (:class:`HashWords`: word ``i`` is the first 8 bytes, little-endian, of
SHA-256(seed ‖ i as 8 bytes little-endian); ``randbelow`` masks the fewest words holding ``n``'s
bits and draws again while the result is ``n`` or more) is implemented the same way in
``participant-js/test/``, so identical words must give identical reports, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import msgpack
import numpy as np
from scipy import stats

from participant import CollectionSpec, Feature, Participant, blind_rsa, tokens
from participant.errors import SpecError
from participant.encoding import record_input
from participant.origin import normalise_origin
from participant.randomness import SecureGenerator
from participant.reporting import Report
from participant.sealing import info, sealed_length
from participant.view import ShuffledView
from participant.wire import pack_report
from protocols import make_oracle
from protocols.exact import exp_lower


class HashWords(SecureGenerator):
    """Deterministic words for known answers only; never a device's randomness."""

    def __init__(self, seed: bytes):
        self.seed, self.counter = seed, 0

    def _words(self, count: int) -> np.ndarray:
        out = []
        for _ in range(count):
            digest = hashlib.sha256(self.seed + self.counter.to_bytes(8, "little")).digest()
            out.append(int.from_bytes(digest[:8], "little"))
            self.counter += 1
        return np.array(out, dtype=np.uint64)

    def words(self, count: int) -> np.ndarray:
        return self._words(count)

    def randbelow(self, n: int) -> int:
        k = n.bit_length()
        count = -(-k // 64)
        while True:
            r = sum(int(w) << (64 * j) for j, w in enumerate(self._words(count))) & ((1 << k) - 1)
            if r < n:
                return r


RANGES = {"inputs": [{"name": "height", "low": 140, "high": 210}, {"name": "weight", "low": 40.5, "high": 150},
                     {"name": "age", "low": 18, "high": 99}]}  # fmt: skip
PROJECTION = {"method": "pca", "matrix": [[0.6, -0.3, 0.1], [0.2, 0.7, -0.4]], "center": [0.05, -0.1, 0.0],
              "outputs": [{"name": "pc1", "low": -1.5, "high": 1.5}, {"name": "pc2", "low": -1.2, "high": 1.3}]}  # fmt: skip


def continuous_record(spec: CollectionSpec, j: int) -> dict:
    """A record of raw continuous values: inside the ranges, on their edges and beyond them."""
    values = [130 + (j * 37) % 90, 30.25 + (j * 13.5) % 130, 10 + (j * 11) % 100]
    record = dict(zip((f.name for f in spec.continuous.inputs), values))
    return {**record, spec.label: spec.classes[j % spec.n_classes]}


def undeclared(record: dict, j: int) -> dict:
    """Every fifth record holds what the spec does not declare (a missing field, a value or class
    the spec leaves out, a number that is not one): the device reports a substitute drawn from the
    declared values, as both participants must, word for word."""
    if j % 5 != 4:
        return record
    name = sorted(record)[j % len(record)]
    return {**record, name: ["not-declared", None, "NaN", True][j % 4]} if j % 3 else {k: v for k, v in record.items() if k != name}


def specs() -> list[CollectionSpec]:
    """Specs that exercise every field the fingerprint reads: protocols, ε written many ways,
    a class share, assigned inputs, a split budget, non-ASCII and escaped names."""
    colour = Feature("colour", ["red", "blue", "green"])
    size = Feature("size", ["S", "M", "L", "XL"])
    return [
        CollectionSpec([colour, size], ["yes", "no"], "DE", 1.0),
        CollectionSpec([colour, size], ["yes", "no"], "OUE", 0.5),
        CollectionSpec([colour, size], ["yes", "no"], "SUE", 2.0, label="outcome"),
        CollectionSpec([colour, size, Feature("big", [str(i) for i in range(40)])], ["a", "b", "c"], "auto", 1.0),
        CollectionSpec([colour, size], ["yes", "no"], "auto", 4.0, class_share=0.4),
        CollectionSpec([colour], ["yes", "no"], "DE", 0.1 + 0.2, input_selection="assigned"),
        CollectionSpec([colour, size], ["yes", "no"], "OUE", 8.0, budget="split"),
        CollectionSpec([Feature("città", ["café", "naïve", 'quote"back\\slash', "tab\tnew\nline", "del\x7f", "😀"])], ["sì", "no"], "DE", 1e-3),
        CollectionSpec([colour, size], ["yes", "no"], "DE", 50.0, theta=0.5),
        CollectionSpec([colour], ["yes", "no"], "SHE", 1.0),
        CollectionSpec([colour, size], ["yes", "no", "maybe"], "THE", 2.0),
        CollectionSpec([size], ["yes", "no"], "THE", 4.0, theta=0.3),
        CollectionSpec([], ["yes", "no"], "auto", 1.0, continuous={**RANGES, "bins": 4}),
        CollectionSpec([], ["yes", "no", "maybe"], "OUE", 2.0, continuous={**RANGES, "projection": PROJECTION, "bins": 5}),
        CollectionSpec([], ["yes", "no"], "DE", 1.0, continuous=RANGES, model="gaussian", approach=3),
        CollectionSpec([], ["yes", "no"], "DE", 2.0, continuous=RANGES, model="gaussian", approach=1),
        CollectionSpec([], ["yes", "no", "maybe"], "DE", 4.0, continuous={**RANGES, "projection": PROJECTION}, model="gaussian", approach=2),
        CollectionSpec([colour, size], ["yes", "no"], "OUE", 4.0, shuffle={
            "min_batch": 1000, "delta": 1e-6, "url": "https://shuffler.example.org/ldpnb",
            "key": {"id": 7, "kem": 32, "kdf": 1, "aead": 1, "public_key": "ab" * 32}}),
        CollectionSpec([colour], ["yes", "no"], "DE", 1.0, shuffle={"min_batch": 2, "delta": 0.25}),
        CollectionSpec([colour, size], ["yes", "no"], "DE", 3.0, shuffle={
            "min_batch": 500, "delta": 1e-5, "dummies": 750, "url": "http://127.0.0.1:8081",
            "key": {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": "0f" * 32}}),
    ]


ORIGINS = [
    "http://127.0.0.1:8080", "HTTP://127.0.0.1:8080/", "http://127.1:8080", "http://2130706433:8080",
    "http://0x7f.0.0.1:8080", "http://0177.0.0.1:8080", "http://[::ffff:127.0.0.1]:8080", "http://localhost:8080",
    "http://LocalHost.:8080", "https://example.org:443/api/", "https://user:pw@example.org/api//x/../",
    "http://example.org:80/%7Eme/%2fa/./b", "http://bücher.example/", "http://[2001:DB8::1]:8443/x",
    "https://example.org/a%20b", "http://faß.example", "http://fass.example", "http://σοφος.example",
    "http://ΣΟΦΟΣ.example",
]


def floats() -> list[float]:
    rng = random.Random(0)
    edge = [0.0, 1.0, -1.0, 0.1, 0.1 + 0.2, 1e-3, 1e-4, 1e-5, 1.5e-7, 123456789.0, 1e15, 1e16, 1.2345e16,
            1e21, 1e22, 5e-324, 1.7976931348623157e308, 2.0**-1074, 0.5, 50.0, 1 / 3, 2 / 3, 100.0]
    rand = [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 20) for _ in range(300)]
    return edge + rand


def vectors() -> dict:
    out: dict = {"floats": [[x, repr(x)] for x in floats()]}
    out["specs"] = []
    for i, spec in enumerate(specs()):
        source = HashWords(f"spec-{i}".encode())
        participant = Participant(spec, rng=source)
        reports = []
        for j in range(40 if spec.budget == "one-report" else 0):
            # every class and category in turn, so that a report's value is sometimes the first,
            # the last and every one between
            if spec.continuous is not None:
                record = continuous_record(spec, j)
            else:
                record = {spec.label: spec.classes[j % spec.n_classes]}
                record |= {f.name: f.categories[(j * 7 + n) % len(f.categories)] for n, f in enumerate(spec.features)}
            record = undeclared(record, j)
            group = j % spec.n_inputs if spec.input_selection == "assigned" else None
            drawn = participant.report(record, group)
            report = Report(drawn.input, drawn.payload, report_id=bytes([j]) * 16)
            reports.append({"record": record, "group": group, "input": report.input, "wire": pack_report(report, spec).hex()})
        out["specs"].append({
            "dict": spec.to_dict(),
            "canonical": json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":")),
            "fingerprint": spec.fingerprint,
            "question": spec.question,
            "protocols": [o.name for o in spec.oracles],
            "inputs": [np.ravel(record_input(continuous_record(spec, 1), spec, i, HashWords(b"inputs"))).tolist()
                       for i in range(spec.n_inputs)] if spec.continuous is not None else None,
            "seed": f"spec-{i}",
            "sealed_length": sealed_length(spec) if spec.shuffle is not None else None,
            "record": continuous_record(spec, 0) if spec.continuous is not None
            else {spec.label: spec.classes[0], **{f.name: f.categories[0] for f in spec.features}},
            "reports": reports,
        })  # fmt: skip
    out["exp_lower"] = []
    for x in (Fraction(0), Fraction(1, 1000), Fraction(1, 2), Fraction(1), Fraction(math.log(3)), Fraction(4), Fraction(50)):
        bound = exp_lower(x)
        out["exp_lower"].append({"x": [str(x.numerator), str(x.denominator)], "bound": [str(bound.numerator), str(bound.denominator)]})
    out["thresholds"] = []
    for protocol in ("DE", "SUE", "OUE"):
        for epsilon in (1e-3, 0.1, 0.5, 1.0, math.log(3), 2.0, 4.0, 8.0, 50.0):
            for d in (2, 3, 8, 64, 1000):
                oracle = make_oracle(protocol, epsilon, d)
                thresholds = [oracle.exact_keep_threshold] if protocol == "DE" else list(oracle.exact_thresholds)
                out["thresholds"].append({"protocol": protocol, "epsilon": epsilon, "d": d, "t": [str(t) for t in thresholds]})
    out["auto"] = [
        {"epsilon": e, "d": d, "protocol": make_oracle("auto", e, d).name}
        for e in (0.5, 1.0, 2.0, 4.0) for d in (2, 3, 5, 8, 10, 11, 12, 13, 20, 21, 24, 30, 64, 135, 165, 200)
    ]  # fmt: skip
    out["origins"] = [[url, normalise_origin(url)] for url in ORIGINS]
    # A shuffled collection's view and HPKE info: what a sealed report carries and is bound to.
    out["views"] = []
    for spec in specs():
        if spec.shuffle is None:
            continue
        for collection, uid, extra_floor, extra_dummies in (("survey-2026", "u" * 32, 0, 0), ("città-é", "0123456789abcdef" * 2, 7, 3)):
            view = ShuffledView(collection, uid, spec, spec.shuffle.min_batch + extra_floor, spec.shuffle.dummies + extra_dummies)
            out["views"].append({
                "spec": spec.to_dict(), "id": collection, "uid": uid, "min_batch": view.min_batch,
                "dummies": view.dummies, "digest": view.digest.hex(), "info": info(view.digest).hex(),
            })  # fmt: skip
    out["spec_shapes"] = spec_shapes()
    out["tokens"] = token_vectors()
    out["issuer_keys"] = [{"issuer_key": key, "refused": _refused(key)} for key in issuer_keys()]
    out["blind_rsa"] = rfc9474_pss()
    # χ² critical values at 1 − 10⁻⁶ for the JavaScript mechanisms' own draws (scipy here, none there).
    out["chi2"] = {str(dof): float(stats.chi2.ppf(1 - 1e-6, dof)) for dof in (1, 4, 7, 8, 12, 16)}
    return out


def spec_shapes() -> list[dict]:
    """Spec mappings a service might publish, each with whether a device reads it
    (:meth:`CollectionSpec.published`) and, when it does, the fingerprint: the JavaScript device
    must read the same ones to the same fingerprints and refuse the rest, so that no spec tells
    the two apart."""
    base = {"features": [{"name": "colour", "categories": ["red", "blue"]}], "classes": ["yes", "no"], "protocol": "THE",
            "epsilon": 1.0, "theta": 0.5}  # fmt: skip
    shapes = [base, {**base, "protocol": "SHE"}]
    for theta in (MISSING, None, 0, 1, 0.25, 1e-300, -0.5, "0.5", True, []):
        for protocol in ("THE", "SHE", "DE"):
            shapes.append(_with(base, protocol=protocol, theta=theta))
    for field, values in {
        "epsilon": (MISSING, None, 0, 1e-4, 1e-3, 50, 50.5, "1", True, 2**70, 1e300),
        "protocol": (MISSING, None, "the", "auto", "", 3),
        "classes": (MISSING, None, [], ["yes"], ["yes", "yes"], ["yes", 2], "yes", ["", "no"]),
        "label": (None, "", "colour", "class", 5),
        "features": (MISSING, None, [], [{"name": "colour"}], [{"name": "c", "categories": []}],
                     [{"name": "c", "categories": ["a", "a"]}], [{"name": "c", "categories": [1, 2]}],
                     [{"name": "c", "categories": ["a"]}, {"name": "c", "categories": ["b"]}],
                     [{"name": "", "categories": ["a"]}], [{"name": "c", "categories": ["a"], "extra": 1}]),
        "budget": (None, "split", "per-input", "one-report", "two"),
        "input_selection": (None, "assigned", "random"),
        "class_share": (None, 0, 0.5, 1, "0.5"),
        "version": (1, 2, "1", None),
        "unknown": ("x",),
        "model": ("gaussian", "discrete", None),
        "approach": (None, 1, 3, 4, "3", True, 3.0),
        "continuous": (None, {}),
        "shuffle": (None, {}, {"min_batch": 2, "delta": 0.25}),
    }.items():  # fmt: skip
        shapes.extend(_with(base, **{field: v}) for v in values)
    # A collection that takes reports only from enrolled people: its issuing key, read (a key of
    # any kind and size whose text has the shape: a device refuses the key itself at submit) or
    # refused as text.
    rsa_4096, rsa_2048, rsa_1024, ec_256 = issuer_keys()
    for issuer_key in (rsa_4096, rsa_2048, rsa_1024, ec_256, None, "A" * 100, "_-" * 500, "", "A" * 99, "A" * 1001,
                       rsa_2048 + "=", rsa_2048.replace("-", "+").replace("_", "/") + "+/", rsa_2048 + "\n", " " + rsa_2048,
                       "é" * 100, 5, True, [rsa_2048], {"der": rsa_2048}):  # fmt: skip
        shapes.append(_with(base, shuffle={"min_batch": 2, "delta": 0.25, "issuer_key": issuer_key}))
    shapes.append(_with(base, shuffle={**SHUFFLE_BLOCK, "issuer_key": rsa_2048}))
    shapes.append(_with(base, shuffle={**SHUFFLE_BLOCK, "issuer_key": "not base64!" * 10}))
    out = []
    for shape in shapes:
        try:
            spec = CollectionSpec.published(json.loads(json.dumps(shape)))
            out.append({"dict": shape, "reads": True, "fingerprint": spec.fingerprint})
        except SpecError as exc:
            out.append({"dict": shape, "reads": False, "why": str(exc)})
    return out


MISSING = object()

SHUFFLE_BLOCK = {"min_batch": 100, "delta": 1e-4, "dummies": 100, "url": "https://shuffler.example.org",
                 "key": {"id": 3, "kem": 32, "kdf": 1, "aead": 1, "public_key": "5a" * 32}}  # fmt: skip
RFC9474 = Path(__file__).resolve().parent / "vectors" / "rfc9474.json"


def _rfc9474() -> list[dict]:
    return json.loads(RFC9474.read_text())


def _hex(value: str) -> bytes:
    text = value.removeprefix("0x")
    return bytes.fromhex(("0" * (len(text) % 2)) + text)


def _words(label: str, size: int) -> bytes:
    """``size`` fixed bytes, SHA-256 in counter mode over ``label``: what the known answers draw."""
    out = b""
    while len(out) < size:
        out += hashlib.sha256(f"{label} {len(out)}".encode()).digest()
    return out[:size]


def _rfc_key(v: dict):
    from cryptography.hazmat.primitives.asymmetric import rsa

    p, q, n, e, d = (int(v[k], 16) for k in ("p", "q", "n", "e", "d"))
    numbers = rsa.RSAPrivateNumbers(
        p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q), rsa.RSAPublicNumbers(e, n)
    )
    return numbers.private_key()


def issuer_keys() -> tuple[str, str, str, str]:
    """Issuing keys as a spec's ``issuer_key``, the same at every run: RFC 9474's RSA key (4096
    bits), RSA public keys of 2048 and 1024 bits (fixed odd moduli: only their shape matters
    here) and an elliptic-curve key (P-256)."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    def modulus(bits: int) -> int:
        return int.from_bytes(_words(f"modulus {bits}", bits // 8), "big") | (1 << (bits - 1)) | 1

    return (
        tokens.encode_key(_rfc_key(_rfc9474()[2]).public_key()),
        tokens.encode_key(rsa.RSAPublicNumbers(65537, modulus(2048)).public_key()),
        tokens.encode_key(rsa.RSAPublicNumbers(65537, modulus(1024)).public_key()),
        tokens.encode_key(ec.derive_private_key(7, ec.SECP256R1()).public_key()),
    )


def _refused(issuer_key: str) -> bool:
    """Whether a device refuses the issuing key itself (not an RSA key of 2048 bits or more)."""
    try:
        tokens.issuing_key(issuer_key)
    except SpecError:
        return True
    return False


def token_vectors() -> list[dict]:
    """A shuffled collection's anonymous token, made by the Python participant
    (:mod:`participant.tokens`) for fixed views and a fixed sealed report, under RFC 9474's key:
    the challenge, the token input, the TokenRequest blinded with a fixed salt and blind (the
    randomness the JavaScript device draws, given to it in the same order), the issuer's blind
    signature and the token it finishes to."""
    private = _rfc_key(_rfc9474()[2])
    public = private.public_key()
    issuer_key = tokens.encode_key(public)
    spec = CollectionSpec([Feature("colour", ["red", "blue"])], ["yes", "no"], "DE", 1.0,
                          shuffle={**SHUFFLE_BLOCK, "issuer_key": issuer_key})  # fmt: skip
    n = public.public_numbers().n
    size = blind_rsa.modulus_bytes(public)
    out = []
    for collection, uid in (("survey-2026", "u" * 32), ("città-é", "0123456789abcdef" * 2)):
        view = ShuffledView(collection, uid, spec, spec.shuffle.min_batch, spec.shuffle.dummies)
        sealed = _words(f"sealed {collection}", sealed_length(spec))
        message = tokens.token_input(view, sealed)
        salt = _words(f"salt {collection}", blind_rsa.SALT_BYTES)
        r = int.from_bytes(_words(f"blind {collection}", size), "big") % n
        assert math.gcd(r, n) == 1
        blinded, inverse = blind_rsa.blind(public, message, salt, r)
        blind_signature = blind_rsa.blind_sign(private, blinded)
        token = tokens.finish(view, sealed, blind_signature, inverse)
        tokens.check(view, sealed, token)
        out.append({
            "spec": spec.to_dict(), "id": collection, "uid": uid, "min_batch": view.min_batch, "dummies": view.dummies,
            "digest": view.digest.hex(), "sealed": sealed.hex(), "challenge": tokens.challenge(view).hex(),
            "key_id": tokens.key_id(issuer_key).hex(), "token_input": message.hex(), "token_length": tokens.token_length(view),
            "salt": salt.hex(), "r": r.to_bytes(size, "big").hex(),
            "request": (tokens.TOKEN_TYPE.to_bytes(2, "big") + tokens.key_id(issuer_key)[-1:] + blinded).hex(),
            "inverse": inverse.to_bytes(size, "big").hex(), "blind_signature": blind_signature.hex(), "token": token.hex(),
        })  # fmt: skip
    return out


def rfc9474_pss() -> list[dict]:
    """RFC 9474's vectors of the two PSS variants (a 48-byte salt: Privacy Pass's), with the key
    as a spec's ``issuer_key`` and the blind ``r`` whose inverse the RFC gives: what the JavaScript
    device's blinding library must reproduce, drawing that salt and that ``r``."""
    out = []
    for v in _rfc9474():
        if v["sLen"] != "0x30":
            continue
        public = _rfc_key(v).public_key()
        n = public.public_numbers().n
        size = blind_rsa.modulus_bytes(public)
        out.append({
            "name": v["name"], "issuer_key": tokens.encode_key(public),
            **{k: _hex(v[k]).hex() for k in ("msg", "msg_prefix", "input_msg", "salt", "blinded_msg", "blind_sig", "sig")},
            "inv": _hex(v["inv"]).rjust(size, b"\0").hex(), "r": pow(int(v["inv"], 16), -1, n).to_bytes(size, "big").hex(),
        })  # fmt: skip
    return out


def _with(base: dict, **fields) -> dict:
    """``base`` with ``fields`` set (removed where the value is :data:`MISSING`)."""
    out = {**base, **{k: v for k, v in fields.items() if v is not MISSING}}
    for k, v in fields.items():
        if v is MISSING:
            out.pop(k, None)
    return out


def wire_map(hex_body: str) -> dict:
    """A packed report's fields, for messages when two differ."""
    return msgpack.unpackb(bytes.fromhex(hex_body))


VECTORS_PATH = Path(__file__).resolve().parent.parent / "participant-js" / "test" / "vectors.json"


def vectors_text() -> str:
    """The vectors file's content: what ``participant-js/test/vectors.json`` must hold."""
    return json.dumps(vectors(), ensure_ascii=False) + "\n"


if __name__ == "__main__":  # python -m tests.js_vectors: rewrite the committed vectors
    VECTORS_PATH.write_text(vectors_text(), encoding="utf-8")
    print(f"wrote {VECTORS_PATH}")
