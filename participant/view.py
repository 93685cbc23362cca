"""A shuffled collection as its shuffler pinned it: the one view every device reports under.

The aggregator creates collections and answers devices, so it could tell each device something
else: its own ``uid`` or sealing key (a report that opens under one device's uid alone names that
device), or a smaller batch floor to the shuffler than to the devices. So a device learns a
shuffled collection's spec, uid, key and floor from the shuffler the *app* pinned, never from the
aggregator alone. The shuffler fetches them from the aggregator once, pins them as the
collection's view and publishes that view to anyone (``GET /collections/{id}/view``, and every
pinned view's digest at ``GET /views``), so that every device, and anyone checking, sees one
view. A device refuses a collection whose aggregator answer differs from the shuffler's view.

The view's :attr:`ShuffledView.digest` binds everything a report's anonymity rests on: the
collection's id and uid, the spec's digest (its questions, ε, key, shuffler and δ) and the batch
floor and dummies the shuffler holds to. Every sealed report carries the digest in the clear
(the shuffler refuses one that differs) and inside HPKE's ``info`` (it opens only under that
view; :mod:`participant.sealing`)::

    SHA-256("ldpnb shuffled view v1" 0x00 ‖ spec digest (32) ‖ min_batch (u64) ‖ dummies (u64)
            ‖ len(id) (u16) ‖ id ‖ len(uid) (u16) ‖ uid)          (integers big-endian, text UTF-8)
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .errors import ClientError, SpecError
from .spec import CollectionSpec

VIEW_PREFIX = b"ldpnb shuffled view v1\x00"
DIGEST_BYTES = 32


def view_digest(collection_id: str, uid: str, spec_digest: bytes, min_batch: int, dummies: int) -> bytes:
    """The 32-byte digest of a view (see the module's text)."""
    cid, u = collection_id.encode(), uid.encode()
    return hashlib.sha256(
        VIEW_PREFIX + spec_digest + struct.pack(">QQ", min_batch, dummies)
        + struct.pack(">H", len(cid)) + cid + struct.pack(">H", len(u)) + u
    ).digest()  # fmt: skip


@dataclass(frozen=True)
class ShuffledView:
    """A shuffled collection as its shuffler pinned it: the ``collection`` id and ``uid`` the
    aggregator published, its ``spec`` (shuffled, naming the shuffler and the sealing key), the
    batch floor ``min_batch`` (people's reports in every batch, at least the spec's) and the
    ``dummies`` the shuffler adds to every batch (at least the spec's)."""

    collection: str
    uid: str
    spec: CollectionSpec
    min_batch: int
    dummies: int

    def __post_init__(self):
        shuffle = self.spec.shuffle
        if shuffle is None:
            raise SpecError(f"collection {self.collection!r} is not shuffled: it has no shuffled view")
        for name, value in (("min_batch", self.min_batch), ("dummies", self.dummies)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise SpecError(f"the view's {name} must be a whole number, got {value!r}"[:200])
        if self.min_batch < shuffle.min_batch or self.dummies < shuffle.dummies:
            raise SpecError(
                f"the shuffler's view of {self.collection!r} holds batches to {self.min_batch} people and "
                f"{self.dummies} dummies, below the spec's {shuffle.min_batch} and {shuffle.dummies}; refusing to report"
            )
        if not isinstance(self.uid, str) or not 16 <= len(self.uid) <= 256 or not isinstance(self.collection, str):
            raise SpecError("the view names no usable collection identity (uid)")

    @cached_property
    def digest(self) -> bytes:
        """The 32-byte digest every sealed report of this view carries."""
        return view_digest(self.collection, self.uid, self.spec.fingerprint_digest, self.min_batch, self.dummies)

    def to_dict(self) -> dict[str, Any]:
        """The view as a shuffler publishes it."""
        return {
            "id": self.collection,
            "uid": self.uid,
            "fingerprint": self.spec.fingerprint,
            "spec": self.spec.to_dict(),
            "min_batch": self.min_batch,
            "dummies": self.dummies,
            "digest": self.digest.hex(),
        }

    @classmethod
    def from_dict(cls, data: Any, limits=None) -> ShuffledView:
        """The view a shuffler's answer describes, checked: the spec's size against ``limits`` (a
        :class:`~participant.limits.Limits`) before it is built, the spec, its fingerprint and
        the stated digest. Raises :class:`SpecError` or :class:`ClientError`."""
        if not isinstance(data, dict):
            raise ClientError("the shuffler's view of the collection is not a mapping")
        try:
            raw, uid, fingerprint, collection = data["spec"], data["uid"], data["fingerprint"], data["id"]
            min_batch, dummies, digest = data["min_batch"], data["dummies"], data["digest"]
        except KeyError as exc:
            raise ClientError(f"the shuffler's view of the collection lacks {exc}") from None
        if not isinstance(collection, str) or not isinstance(fingerprint, str) or not isinstance(digest, str):
            raise ClientError("the shuffler's view names a collection, fingerprint or digest that is not text")
        if limits is not None:
            limits.check_spec(raw, collection)
        spec = CollectionSpec.published(raw)
        if fingerprint != spec.fingerprint:
            raise ClientError("the shuffler's view does not match its spec's fingerprint; refusing to report")
        view = cls(collection, uid, spec, min_batch, dummies)
        if digest != view.digest.hex():
            raise ClientError("the shuffler's view does not match its digest; refusing to report")
        return view

    def check_published(self, collection_id: str, uid: str, fingerprint: str) -> None:
        """Raise :class:`SpecError` unless the aggregator published this very collection: the id
        the app asked for, the view's uid and spec. Another uid or spec is one device told
        something else (or a collection recreated under the same id, which its shuffler keeps
        the first view of)."""
        if self.collection != collection_id:
            raise SpecError(f"the shuffler answered for collection {self.collection!r}, not {collection_id!r}; refusing to report")
        if (self.uid, self.spec.fingerprint) != (uid, fingerprint):
            raise SpecError(
                f"the aggregator publishes collection {collection_id!r} with another identity or spec than the view its "
                "shuffler pinned (a device told something else, or a collection recreated under the same id); "
                "refusing to report"
            )
