"""Collections collected through a shuffler: the aggregator's sealing keys, and a collection's shuffler.

**Sealing keys** are the HPKE key pairs devices seal shuffled reports to.

They live in the database's settings (the file or database that already holds the enrollment key,
readable by the operator alone), as one JSON list: every key ever made, its X25519 private and
public halves and when it was made. The newest is *current*: a shuffled collection created now
names it in its spec (and the spec, immutable, keeps naming it). Rotating makes a new current key
and keeps the others, so reports sealed for a collection created before open as they did; a key
is never deleted by the service. Every instance reads the list from the database, so a key made on
one opens reports on all.

**A collection's shuffler** is named when the collection is created: its URL and the batch floor
go into the spec's ``shuffle`` block (with the current key), and the hash of the token the
shuffler presents into the settings (:func:`shuffler_setting`). A shuffled collection created with
enrollment takes reports only from enrolled people through anonymous tokens, which the shuffler
checks and the aggregator never sees (:mod:`.issuance`): its spec names its issuing key.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

from participant import tokens
from participant.errors import SpecError
from participant.reasons import failure_reason
from participant.sealing import new_key_pair
from participant.shuffled import SealingKey, Shuffle
from participant.spec import CollectionSpec

from ..store import Store
from .auth import TokenError, check_admin_token

SETTING = "sealing_keys"
KEM, KDF, AEAD = 0x0020, 0x0001, 0x0001  # DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM


def _public(key: dict) -> SealingKey:
    return SealingKey(key["id"], KEM, KDF, AEAD, key["public"])


async def all_keys(store: Store) -> list[dict]:
    """Every sealing key ``{"id", "private", "public", "created_at"}`` (hex), oldest first."""
    stored = await store.get_setting(SETTING)
    return json.loads(stored) if stored else []


async def current_key(store: Store) -> SealingKey:
    """The public configuration of the newest key, made on first use."""
    keys = await all_keys(store)
    if not keys:
        return await rotate(store, first=True)
    return _public(keys[-1])


async def rotate(store: Store, first: bool = False) -> SealingKey:
    """A new current key (its id one more than the last's, modulo 256); returns its public
    configuration. ``first``: only if there is none yet (instances starting together make one)."""
    keys = await all_keys(store)
    if first and keys:
        return _public(keys[-1])
    private, public = new_key_pair()
    key = {"id": (keys[-1]["id"] + 1) % 256 if keys else 0, "private": private.hex(), "public": public.hex(),
           "created_at": time.time()}  # fmt: skip
    stored = json.dumps([*keys, key])
    if first:
        stored = await store.set_setting(SETTING, stored, replace=False)
        return _public(json.loads(stored)[-1])
    await store.set_setting(SETTING, stored)
    return _public(key)


async def private_key_bytes(store: Store, key: SealingKey) -> bytes | None:
    """The private half of the key a spec names (its id and public half both match), or None."""
    for stored in reversed(await all_keys(store)):
        if stored["id"] == key.id and stored["public"] == key.public_key:
            return bytes.fromhex(stored["private"])
    return None


ISSUING_KEY_BITS = 2048


def key_setting(collection_id: str) -> str:
    """The setting holding a collection's issuing key (PKCS #8 PEM, :mod:`.issuance`)."""
    return f"issuer_key {collection_id}"


def new_issuing_key() -> tuple[str, str]:
    """A fresh issuing key for a collection's anonymous tokens: ``(public half as a spec's
    issuer_key, private half as PKCS #8 PEM)``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=ISSUING_KEY_BITS)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return tokens.encode_key(key.public_key()), pem.decode()


def shuffler_setting(collection_id: str) -> str:
    """The setting holding the hash of the token a collection's shuffler presents."""
    return f"shuffler_token_sha256 {collection_id}"


async def through_shuffler(
    store: Store, spec: CollectionSpec, shuffler, issuer_key: str | None = None
) -> tuple[CollectionSpec, str | None]:
    """``spec`` as collected through the shuffler ``{"url", "token", "min_batch", "delta",
    "dummies"}`` the operator named (its shuffle block completed with the shuffler's URL, this
    service's current sealing key and, for a collection with enrollment, its ``issuer_key``; the
    dummies, when neither names them, the default share of the floor), and the token; ``spec``
    unchanged and None without one. Raises SpecError."""
    if shuffler is None:
        if spec.shuffle is not None:
            raise SpecError("a shuffled spec needs its shuffler: send 'shuffler': {'url', 'token', 'min_batch'}")
        return spec, None
    if not isinstance(shuffler, dict) or not set(shuffler) <= {"url", "token", "min_batch", "delta", "dummies"}:
        raise SpecError("shuffler must be a mapping of url, token, min_batch, delta and dummies")
    token = shuffler.get("token")
    if not isinstance(token, str):
        raise SpecError("shuffler.token must be the secret the shuffler presents (text)")
    try:
        check_admin_token(token)
    except TokenError as exc:
        raise SpecError(f"shuffler.token: {str(exc).replace('admin token', 'token')}") from None
    base = spec.shuffle.to_dict() if spec.shuffle is not None else {}
    min_batch = shuffler.get("min_batch", base.get("min_batch"))
    delta = shuffler.get("delta", base.get("delta"))
    dummies = shuffler.get("dummies", base.get("dummies"))
    floor_given = isinstance(min_batch, int) and not isinstance(min_batch, bool) and min_batch > 0
    if floor_given:
        from protocols.shuffling import default_delta, default_dummies

        delta = default_delta(min_batch) if delta is None else delta
        dummies = default_dummies(min_batch) if dummies is None else dummies
    key = await current_key(store)
    block = {"min_batch": min_batch, "delta": delta, "url": shuffler.get("url"), "key": key.to_dict()}
    if dummies is not None:
        block["dummies"] = dummies
    if issuer_key is not None:
        block["issuer_key"] = issuer_key
    return replace(spec, shuffle=Shuffle.from_dict(block)), token


async def shuffler_progress(collection, timeout: float = 2.0) -> dict:
    """What the collection's shuffler publishes of it (``GET {url}/collections/{id}``: the floor
    and dummies it holds batches to, the people's reports it forwarded, whether it closed; never
    how many wait), or why it could not say, within ``timeout`` seconds; an ``error`` when the view
    it pinned is not this collection's (a collection recreated under an id the shuffler pinned:
    devices refuse it)."""
    import aiohttp

    spec = collection.spec
    url = f"{spec.shuffle.url.rstrip('/')}/collections/{collection.id}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url, allow_redirects=False) as answer:
                data = await answer.json(content_type=None) if answer.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return {"url": spec.shuffle.url, "error": f"the shuffler did not answer: {failure_reason(exc)}"}
    fields = ("min_batch", "dummies", "forwarded")
    if not isinstance(data, dict) or not all(isinstance(data.get(f), int) for f in fields):
        return {"url": spec.shuffle.url, "error": "the shuffler has pinned no view of this collection yet"}
    if (data.get("uid"), data.get("fingerprint")) != (collection.uid, spec.fingerprint):
        return {
            "url": spec.shuffle.url,
            "error": "the shuffler pinned another collection under this id (one created before under the same id): "
            "devices refuse to report to it; create the collection under a new id",
        }
    return {"url": spec.shuffle.url, **{f: data[f] for f in fields}, "closed": bool(data.get("closed"))}


def stated_privacy(spec: CollectionSpec) -> str:
    """What a person spends, in words (:meth:`~participant.spec.CollectionSpec.privacy_statement`);
    for a shuffled collection with the shuffle accountant's two ε (:func:`shuffled_guarantees`)."""
    if spec.shuffle is None:
        return spec.privacy_statement()
    found = shuffled_guarantees(spec)
    return spec.privacy_statement(found["people"], found["flooded"])


def shuffled_guarantees(spec: CollectionSpec) -> dict:
    """A shuffled collection's guarantees against the aggregator alone, as the service publishes
    them: ``local_epsilon`` (what a device spends), ``delta``, ``people`` (ε when a person's batch
    holds ``min_batch − 1`` other people's reports and the ``dummies``) and ``flooded`` (ε when the
    aggregator wrote every other report: the person's among the dummies alone), and whether that
    one is ``amplified`` at all."""
    from protocols.shuffling import guarantees

    shuffle = spec.shuffle
    found = guarantees(spec.epsilon, shuffle.min_batch, shuffle.dummies, shuffle.delta)
    return {
        "local_epsilon": spec.epsilon, "delta": shuffle.delta, "min_batch": shuffle.min_batch,
        "dummies": shuffle.dummies, **found,
    }  # fmt: skip
