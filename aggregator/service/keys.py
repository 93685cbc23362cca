"""Typed keys of the objects the application holds (aiohttp's ``AppKey`` convention), and the
service's settings."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from ..store import Store
from .answers import AnswerCache
from .metrics import Metrics
from .opening import Opener
from .ratelimit import RateLimiter
from .writer import ReportWriter


@dataclass(frozen=True)
class Config:
    """Service limits, per instance (what all instances must agree on lives in the database)."""

    max_body_bytes: int = 8 * 1024 * 1024  # a request body, as sent (bodies are never inflated)
    max_batch: int = 10_000  # reports in one batch
    rate_limit: int = 0  # reports per collection per minute from one address; 0: no limit
    max_state: int = 1_000_000  # a collection's statistics entries (sum of its inputs' state sizes)
    metrics_per_collection: bool = False  # label /metrics series with collection ids
    keepalive_timeout: float = 15.0  # seconds a connection may stay without a complete request (idle or slow headers)
    max_connections: int = 1024  # open at once; a further one is answered 503 and closed
    body_timeout: float = 30.0  # seconds to receive a request body
    max_header_bytes: int = 8190  # a request line or header field
    max_connections_per_address: int = 256  # open at once from one peer group (trusted proxies excepted)
    slot_prefix: tuple = (24, 64)  # the IPv4 and IPv6 prefix lengths peers are grouped by for those slots
    trusted_proxies: tuple = ()  # ipaddress networks whose X-Forwarded-For names the device
    db_timeout: float = 5.0  # seconds a request may wait for the database, end to end (queue, pool, lock, link)
    allowed_origins: tuple = ()  # web pages (scheme://host[:port]) whose browsers may call the service (CORS)
    public_origin: str = ""  # the service's own origin as browsers reach it (its status page); "" when not set
    open_processes: int = 0  # processes opening sealed reports (aggregator.service.opening); 0: the cores


CONFIG = web.AppKey("config", Config)
ENROLLMENT_HMAC = web.AppKey("enrollment_hmac", bytes)
STORE = web.AppKey("store", Store)
WRITER = web.AppKey("writer", ReportWriter)
METRICS = web.AppKey("metrics", Metrics)
LIMITER = web.AppKey("limiter", RateLimiter)
ADMIN_FAILURES = web.AppKey("admin_failures", RateLimiter)
ANSWERS = web.AppKey("answers", AnswerCache)
SPEC_ANSWERS = web.AppKey("spec_answers", AnswerCache)  # what each collection publishes, encoded once
OPENER = web.AppKey("opener", Opener)  # opens shuffled batches in processes of its own
FLAGS = web.AppKey("flags", dict)  # per collection id: (its report count, its plausibility flag)
