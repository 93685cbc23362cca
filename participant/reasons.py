"""Why a request or a store failed, in words an operator reads rather than a library's exception
name ("the connection was refused", not ``ClientConnectorError``). Imports only the standard
library and aiohttp (a core dependency)."""

from __future__ import annotations

import asyncio
import sqlite3
import ssl


def failure_reason(exc: BaseException) -> str:
    """What went wrong with a call to another service or a database, as a short phrase."""
    import aiohttp

    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "it did not answer in time"
    if isinstance(exc, (ssl.SSLError, aiohttp.ClientSSLError)):
        return "the TLS connection failed"
    if isinstance(exc, (aiohttp.ClientConnectorError, ConnectionRefusedError)):
        return "nothing answers at that address (the connection was refused or could not be made)"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError)):
        return "the connection closed before the answer"
    if isinstance(exc, ValueError) and not isinstance(exc, sqlite3.Error):
        return "its answer is not what was expected (not JSON)"
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        if "locked" in text or "busy" in text:
            return "the database file is locked by another process"
        return f"the database failed: {text}"[:200]
    text = str(exc).strip()
    return text[:200] if text else "an unexpected failure"
