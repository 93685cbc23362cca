"""Typed keys of the objects the application holds (aiohttp's ``AppKey`` convention)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from .metrics import Metrics
from .ratelimit import RateLimiter
from .store import Store
from .writer import ReportWriter


@dataclass(frozen=True)
class Config:
    """Service settings. ``max_body_bytes`` caps a request body, ``max_batch`` a batch's reports."""

    admin_token_hash: str
    max_body_bytes: int = 8 * 1024 * 1024
    max_batch: int = 10_000
    rate_limit: int = 0  # reports per collection per minute from one address; 0: no limit
    enrollment_key: bytes = b""  # HMAC key of enrollment tokens


CONFIG = web.AppKey("config", Config)
STORE = web.AppKey("store", Store)
WRITER = web.AppKey("writer", ReportWriter)
METRICS = web.AppKey("metrics", Metrics)
LIMITER = web.AppKey("limiter", RateLimiter)
