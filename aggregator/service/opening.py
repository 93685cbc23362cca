"""Opening sealed reports on every core: a pool of processes, so that a shuffled batch never holds
the event loop.

Opening one report is an X25519 key agreement and an HPKE key schedule (about 50 µs with the key's
object built once), and ``cryptography`` holds the GIL while it works: threads would open no
faster than the loop, and on the loop a batch of 10,000 holds every other request for half a
second. So batches are opened by :data:`Opener.processes` processes (by default the machine's
cores, divided among the service's workers), each building a key's object once
(:func:`participant.sealing.open_many`), a batch cut into one slice per process. A batch of fewer
than :data:`INLINE` reports is opened on the loop, where it costs less than the trip to a process.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from participant.sealing import open_many
from participant.usage import die_with_parent

# Reports opened on the event loop rather than in the pool: the trip costs about as much.
INLINE = 32


def default_processes(workers: int = 1) -> int:
    """Opening processes for each of ``workers`` service processes: the cores shared among them."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


class Opener:
    """Opens sealed reports in ``processes`` processes (started on first use, with ``spawn``: the
    service's loop and its connections are not copied into them; each ends with the service)."""

    def __init__(self, processes: int):
        self.processes = max(1, int(processes))
        self._pool: ProcessPoolExecutor | None = None

    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=die_with_parent)
        return self._pool

    async def open(self, raw_key: bytes, view_digest: bytes, length: int, sealed: list) -> list:
        """Every report of ``sealed`` opened: its packed report, or why it did not open (a str)."""
        if len(sealed) < INLINE:
            return open_many(raw_key, view_digest, length, sealed)
        loop = asyncio.get_running_loop()
        pool = self.pool()
        step = -(-len(sealed) // self.processes)
        slices = [sealed[start : start + step] for start in range(0, len(sealed), step)]
        opened = await asyncio.gather(
            *(loop.run_in_executor(pool, open_many, raw_key, view_digest, length, part) for part in slices)
        )
        return [item for part in opened for item in part]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
