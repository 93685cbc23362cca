"""Group commit: reports from concurrent requests are stored in shared durable transactions.

Each request waits until the transaction holding its reports has committed, so an acknowledged
report is on disk, while many requests share one fsync.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

import numpy as np

from .store import IncomingBatch, Store

MAX_REPORTS_PER_TRANSACTION = 20_000


class ReportWriter:
    def __init__(self, store: Store, executor: Executor):
        self.store = store
        self.executor = executor
        self.queue: asyncio.Queue[tuple[list[IncomingBatch], asyncio.Future]] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="ldpnb-report-writer")

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    async def submit(self, batches: list[IncomingBatch]) -> list[np.ndarray]:
        """Store ``batches``; returns per batch a mask of the reports that were new (True) and
        not duplicates. Returns once the transaction holding them has committed."""
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((batches, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            pending = [await self.queue.get()]
            size = sum(map(len, pending[0][0]))
            while not self.queue.empty() and size < MAX_REPORTS_PER_TRANSACTION:
                pending.append(self.queue.get_nowait())
                size += sum(map(len, pending[-1][0]))
            combined = [batch for batches, _ in pending for batch in batches]
            try:
                accepted = await loop.run_in_executor(self.executor, self.store.ingest, combined)
            except Exception as exc:  # the whole transaction rolled back: nobody is acknowledged
                for _, future in pending:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for batches, future in pending:
                if not future.done():
                    future.set_result(accepted[start : start + len(batches)])
                start += len(batches)
