"""Failures of another service or a database are told in words, not a library's exception name."""

from __future__ import annotations

import asyncio
import socket
import sqlite3

import aiohttp

from participant.reasons import failure_reason


async def test_a_refused_connection_a_timeout_and_a_locked_file_are_said_in_words(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"http://127.0.0.1:{port}/")
        except aiohttp.ClientError as exc:
            refused = failure_reason(exc)
    assert refused.startswith("nothing answers at that address") and "Client" not in refused
    assert failure_reason(asyncio.TimeoutError()) == "it did not answer in time"
    db = tmp_path / "x.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sqlite3.connect(db, timeout=0.01).execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        locked = failure_reason(exc)
    finally:
        holder.close()
    assert locked == "the database file is locked by another process"
