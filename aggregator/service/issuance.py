"""Anonymous tokens for shuffled collections that take reports only from enrolled people: the
aggregator as their issuer (:mod:`participant.tokens` holds the protocol).

A shuffled collection created with enrollment gets an RSA-2048 issuing key of its own
(:func:`~aggregator.service.shuffling.new_issuing_key`); its public half goes into the spec (``shuffle.issuer_key``: every device checks its token against the key its
shuffler's view pins), its private half into the settings (``issuer_key {id}``), beside the other
keys the operator alone reads. The operator hands out one-time codes as for any enrollment
(``POST /collections/{id}/enrollments``, ``aggregator enroll``); a code obtains one token:

``POST /collections/{id}/tokens`` with ``{"code", "request"}`` (the code, and RFC 9578's
TokenRequest: URL-safe base64 in JSON, bytes in msgpack) answers ``{"response"}``, the blind
signature. The issuer never sees what it signs. A code is spent by its first request, which is
remembered with its answer (``token issued {id} {code's nonce}``): the same request again (a
device whose answer was lost) gets the same answer, any other request with that code 409.

The private operation runs on a worker thread (3 to 5 ms for RSA-2048), its base blinded and its
result checked (:func:`participant.blind_rsa.blind_sign`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from aiohttp import web

from participant import tokens
from participant.blind_rsa import BlindSignatureError, blind_sign

from ..store import Store
from .auth import enrollment_nonce
from .errors import APIError
from .plumbing import get_collection, off_loop, read_body, respond, wants_msgpack
from .keys import ENROLLMENT_HMAC, STORE
from .shuffling import key_setting

routes = web.RouteTableDef()


def issued_setting(collection_id: str, nonce: bytes) -> str:
    """The setting remembering what one code obtained: its request's SHA-256 and the answer."""
    return f"token issued {collection_id} {nonce.hex()}"


_KEYS: dict[str, object] = {}  # loaded private keys, by their PEM


async def _private_key(store: Store, collection_id: str):
    pem = await store.get_setting(key_setting(collection_id))
    if pem is None:
        raise APIError(503, "this service no longer holds the collection's issuing key")
    key = _KEYS.get(pem)
    if key is None:
        from cryptography.hazmat.primitives import serialization

        key = _KEYS[pem] = serialization.load_pem_private_key(pem.encode(), password=None)
    return key


def _request_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str) and len(value) <= 2048:
        try:
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        except (binascii.Error, ValueError):
            pass
    raise APIError(400, "request must be a TokenRequest: bytes, or URL-safe base64 in JSON", reason="malformed")


@routes.post("/collections/{collection_id}/tokens")
async def issue(request: web.Request) -> web.Response:
    """One token's blind signature for a one-time code (see the module's text)."""
    app = request.app
    collection = await get_collection(request)
    shuffle = collection.spec.shuffle
    if shuffle is None or shuffle.issuer_key is None or not collection.enrollment:
        raise APIError(409, f"collection {collection.id!r} issues no tokens: it takes reports without enrollment")
    data = await read_body(request)
    if not isinstance(data, dict) or set(data) != {"code", "request"}:
        raise APIError(400, "send {'code': the code you were given, 'request': a TokenRequest}", reason="malformed")
    nonce = enrollment_nonce(app[ENROLLMENT_HMAC], collection.id, data["code"])
    if nonce is None:
        raise APIError(403, "this code was not issued for this collection", reason="bad_code")
    raw = _request_bytes(data["request"])
    try:
        blinded = tokens.read_request(shuffle.issuer_key, raw)
    except tokens.TokenError as exc:
        raise APIError(400, str(exc), reason=exc.reason) from None
    asked = hashlib.sha256(raw).hexdigest()
    setting = issued_setting(collection.id, nonce)
    remembered = await app[STORE].get_setting(setting)
    if remembered is None:
        key = await _private_key(app[STORE], collection.id)
        try:
            signed = await off_loop(blind_sign, key, blinded)
        except BlindSignatureError as exc:
            raise APIError(400, str(exc), reason="malformed") from None
        mine = json.dumps({"request": asked, "response": signed.hex()})
        remembered = await app[STORE].set_setting(setting, mine, replace=False)
    kept = json.loads(remembered)
    if kept["request"] != asked:
        raise APIError(409, "this code obtained its token already (one token per code)", reason="code_used")
    response = bytes.fromhex(kept["response"])
    if wants_msgpack(request):
        return respond(request, {"response": response})
    return respond(request, {"response": base64.urlsafe_b64encode(response).rstrip(b"=").decode()})
