"""Admin bearer tokens (only their SHA-256 is stored; comparison takes constant time) and
participant enrollment tokens.

An enrollment token is ``nonce (16 bytes) || HMAC-SHA256(key, collection id || nonce)[:16]``,
issued by the service to the operator, who hands one to each enrolled person. The service keeps
only its HMAC key and the nonces already used, so it can tell a forged token (bad tag) and a
reused one (its nonce carried another report) without storing the tokens it issued.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from aiohttp import web

from .errors import APIError

SETTING_KEY = "admin_token_sha256"
ENROLLMENT_KEY = "enrollment_hmac_key"
NONCE_BYTES = TAG_BYTES = 16


MIN_ADMIN_TOKEN_CHARS = 22  # 22 URL-safe base64 characters carry 132 bits
# What a token may hold: visible ASCII. Nothing that any layer could strip, fold or normalise.
TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


class TokenError(ValueError):
    """An admin token the service refuses to run with."""


def check_admin_token(token: str) -> str:
    """``token`` if it may guard the admin routes: at least 22 characters, visible ASCII only
    (no spaces); raises :class:`TokenError` naming what is wrong."""
    if len(token) < MIN_ADMIN_TOKEN_CHARS:
        raise TokenError(
            f"the admin token must have at least {MIN_ADMIN_TOKEN_CHARS} characters (about 128 bits), "
            f"got {len(token)}; omit it on first start and one is generated"
        )
    if not TOKEN_CHARS.fullmatch(token):
        raise TokenError("the admin token may hold only visible ASCII characters (no spaces)")
    return token


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def require_admin(
    request: web.Request, token_hash: str, failures=None, source: str | None = None, who: str = "the admin token"
) -> None:
    """Raise 401 without a bearer token, 403 with a wrong one (``who`` names the token expected:
    the admin's, or a collection's shuffler's), and 429 for a wrong one once its
    address (``source``, else the peer's) has failed too often (``failures``, a
    :class:`~aggregator.service.ratelimit.RateLimiter`, spends one token per failed attempt). The right
    token always passes: others' failures from a shared address never lock the operator out, and
    guessing a token of 22 or more random characters is hopeless at any rate."""
    source = (request.remote or "") if source is None else source
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise APIError(
            401,
            f"this endpoint needs {who}: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer realm="ldpnb-admin"'},
        )
    # The token is compared as sent, never stripped: whitespace is not part of any valid token.
    # Hash first so the comparison's time does not depend on the token's length or prefix.
    if not (TOKEN_CHARS.fullmatch(token) and hmac.compare_digest(hash_token(token), token_hash)):
        if failures is not None and failures.take("admin", source):
            raise APIError(
                429, "too many failed admin attempts from this address; wait a minute", headers={"Retry-After": "60"}
            )
        raise APIError(403, f"{who} is wrong")


def _tag(key: bytes, collection_id: str, nonce: bytes) -> bytes:
    return hmac.new(key, collection_id.encode() + nonce, hashlib.sha256).digest()[:TAG_BYTES]


def issue_enrollment_tokens(key: bytes, collection_id: str, count: int) -> list[str]:
    """``count`` fresh tokens for ``collection_id``, URL-safe base64 (as people receive them)."""
    tokens = []
    for _ in range(count):
        nonce = secrets.token_bytes(NONCE_BYTES)
        tokens.append(base64.urlsafe_b64encode(nonce + _tag(key, collection_id, nonce)).decode())
    return tokens


def enrollment_nonce(key: bytes, collection_id: str, token) -> bytes | None:
    """The token's nonce if ``token`` (raw bytes or its base64 text) was issued for this
    collection by this service, else None."""
    if isinstance(token, str):
        try:
            token = base64.urlsafe_b64decode(token.encode())
        except (ValueError, UnicodeEncodeError):
            return None
    if not isinstance(token, bytes) or len(token) != NONCE_BYTES + TAG_BYTES:
        return None
    nonce, tag = token[:NONCE_BYTES], token[NONCE_BYTES:]
    return nonce if hmac.compare_digest(tag, _tag(key, collection_id, nonce)) else None
