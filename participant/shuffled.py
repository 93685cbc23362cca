"""A collection whose reports reach the aggregator through a shuffler: the spec's ``shuffle`` block.

A shuffled collection's spec says so: ``{"min_batch": K, "delta": D, "dummies": M}`` and, for
devices to send through it, the shuffler's ``url`` and the aggregator's HPKE ``key`` the reports
are sealed to; a collection that takes reports only from enrolled people adds the public key that
issues their anonymous tokens, ``issuer_key`` (:mod:`participant.tokens`). The fingerprint covers
the whole block, so another shuffler, floor, blanket, key or issuer is another question, and the
one issuing key every device checks its token against is the one its shuffler's view pins. A person then has three guarantees: the collection's ε₀ against the
aggregator and the shuffler together (what the device spends, whatever anyone does); (ε, δ)
against the aggregator alone when the other reports of their batch come from people (K − 1 of
them and the shuffler's M dummies, ``protocols.shuffling``); and, lower but still below ε₀ when M
is large enough, (ε, δ) against an aggregator that fills the batch with its own reports, from the
M dummy reports the shuffler draws into every batch (:mod:`participant.dummies`).

``delta`` must lie below ``1/K``: at ``1/K`` an (ε, δ) release may publish one person's record of
every batch outright, so a larger δ says nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import SpecError

#: Fewest reports a shuffler may release at once: below, the aggregator could isolate a report.
MIN_BATCH_RANGE = (2, 10**9)
#: Dummy reports the shuffler adds to every batch.
DUMMIES_RANGE = (0, 10**9)
# HPKE (RFC 9180) identifiers a key may name: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and
# AES-128-GCM (native to every browser's Web Crypto, so a page seals without more code).
KEMS = {0x0020: "DHKEM(X25519, HKDF-SHA256)"}
KDFS = {0x0001: "HKDF-SHA256"}
AEADS = {0x0001: "AES-128-GCM"}
_HEX_KEY = re.compile(r"[0-9a-f]{64}")
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
# An issuing key: DER SubjectPublicKeyInfo in URL-safe base64 without padding; an RSA key of 2048
# to 4096 bits takes about 400 to 750 characters.
_ISSUER_KEY = re.compile(r"[A-Za-z0-9_-]{100,1000}")


def _integer(value, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(f"{what} must be an integer from {low} to {high}, got {value!r}"[:200])
    return value


@dataclass(frozen=True)
class SealingKey:
    """The aggregator's HPKE public key reports are sealed to: its ``id`` (0-255, which of the
    aggregator's keys opens it), the suite (``kem``, ``kdf``, ``aead``: RFC 9180 identifiers) and
    the X25519 ``public_key`` (32 bytes, as 64 lower-case hex digits)."""

    id: int
    kem: int
    kdf: int
    aead: int
    public_key: str

    @classmethod
    def from_dict(cls, data: Any) -> SealingKey:
        if not isinstance(data, dict) or set(data) != {"id", "kem", "kdf", "aead", "public_key"}:
            raise SpecError("shuffle.key must be a mapping of id, kem, kdf, aead and public_key")
        key = cls(
            _integer(data["id"], "shuffle.key.id", 0, 255),
            _integer(data["kem"], "shuffle.key.kem", 0, 0xFFFF),
            _integer(data["kdf"], "shuffle.key.kdf", 0, 0xFFFF),
            _integer(data["aead"], "shuffle.key.aead", 0, 0xFFFF),
            data["public_key"],
        )
        if key.kem not in KEMS or key.kdf not in KDFS or key.aead not in AEADS:
            raise SpecError(
                f"shuffle.key names a suite this library does not seal with ({key.kem}, {key.kdf}, {key.aead}); "
                f"it takes {', '.join(KEMS.values())} with {', '.join(KDFS.values())} and {' or '.join(AEADS.values())}"
            )
        if not isinstance(key.public_key, str) or not _HEX_KEY.fullmatch(key.public_key):
            raise SpecError("shuffle.key.public_key must be an X25519 public key: 64 lower-case hex digits")
        return key

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kem": self.kem, "kdf": self.kdf, "aead": self.aead, "public_key": self.public_key}


@dataclass(frozen=True)
class Shuffle:
    """How a collection's reports are shuffled: released in batches of at least ``min_batch``
    people's reports and ``dummies`` of the shuffler's own, stated at ``delta``; through the
    shuffler at ``url``, sealed to ``key`` (both None in a spec that is only simulated: a device
    refuses to report to it); with ``issuer_key`` (the issuing key's DER SubjectPublicKeyInfo,
    URL-safe base64 without padding), only reports carrying an anonymous token it issued."""

    min_batch: int
    delta: float
    url: str | None = None
    key: SealingKey | None = None
    dummies: int = 0
    issuer_key: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Shuffle:
        if isinstance(data, Shuffle):
            return data
        if not isinstance(data, dict):
            raise SpecError("shuffle must be a mapping of min_batch and delta (and the shuffler's url and key)")
        unknown = set(data) - {"min_batch", "delta", "url", "key", "dummies", "issuer_key"}
        if unknown:
            raise SpecError(f"unknown shuffle fields: {', '.join(sorted(map(str, unknown)))}")
        if "min_batch" not in data or "delta" not in data:
            raise SpecError("shuffle needs min_batch (the fewest reports released at once) and delta")
        min_batch = _integer(data["min_batch"], "shuffle.min_batch", *MIN_BATCH_RANGE)
        delta = data["delta"]
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (math.isfinite(delta) and 0 < delta < 1):
            raise SpecError(f"shuffle.delta must lie in (0, 1), got {delta!r}"[:200])
        if delta * min_batch >= 1:
            raise SpecError(
                f"shuffle.delta {delta:g} is not below 1/min_batch = 1/{min_batch}: at that delta one person's record "
                "of every batch could be published outright"
            )
        dummies = _integer(data.get("dummies", 0), "shuffle.dummies", *DUMMIES_RANGE)
        url = data.get("url")
        if url is not None and (not isinstance(url, str) or len(url) > 2048 or not _URL.fullmatch(url)):
            raise SpecError("shuffle.url must be the shuffler's http(s) URL")
        key = data.get("key")
        issuer_key = data.get("issuer_key")
        if issuer_key is not None and (not isinstance(issuer_key, str) or not _ISSUER_KEY.fullmatch(issuer_key)):
            raise SpecError("shuffle.issuer_key must be an issuing key's DER SubjectPublicKeyInfo in URL-safe base64")
        sealing = None if key is None else SealingKey.from_dict(key)
        return cls(min_batch, float(delta), url, sealing, dummies, issuer_key)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"min_batch": self.min_batch, "delta": self.delta}
        if self.dummies:
            out["dummies"] = self.dummies
        if self.url is not None:
            out["url"] = self.url
        if self.key is not None:
            out["key"] = self.key.to_dict()
        if self.issuer_key is not None:
            out["issuer_key"] = self.issuer_key
        return out

    def check_sendable(self) -> None:
        """Raise :class:`SpecError` unless a device can send through this shuffler (its URL and key)."""
        if self.url is None or self.key is None:
            raise SpecError("this collection is shuffled but its spec names no shuffler url or sealing key; refusing to report")
