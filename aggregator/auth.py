"""Admin bearer tokens: only their SHA-256 is stored, and comparison takes constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from aiohttp import web

from .errors import APIError

SETTING_KEY = "admin_token_sha256"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def require_admin(request: web.Request, token_hash: str) -> None:
    """Raise 401 without a bearer token and 403 with a wrong one."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise APIError(
            401,
            "this endpoint needs the admin token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer realm="ldpnb-admin"'},
        )
    # Hash first so the comparison's time does not depend on the token's length or prefix.
    if not hmac.compare_digest(hash_token(token.strip()), token_hash):
        raise APIError(403, "the admin token is wrong")
