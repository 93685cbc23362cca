"""Replaying a collection over HTTP: every training row is an independent participant client.

The reports are drawn exactly as the in-process simulator draws them (same seed, same split), so
the model fetched from the aggregator matches the in-process one; what this path adds is the real
wire format, service, store and client, and a measure of ingest throughput.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import aiohttp
import numpy as np
from tqdm import tqdm

from aggregator import model_from_dict
from participant.client import AsyncClient
from participant.reporting import PerturbedInputs, Report
from participant.spec import CollectionSpec
from participant.wire import pack_report

from .datasets import Dataset
from .experiment import RunResult, Setup, nonprivate_accuracy, simulate_reports, spec_for, split


class LocalAggregator:
    """``python -m aggregator serve`` on a free loopback port with a throwaway database."""

    def __enter__(self) -> LocalAggregator:
        self.tmp = tempfile.TemporaryDirectory(prefix="ldpnb-sim-")
        self.admin_token = secrets.token_urlsafe(24)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aggregator",
                "serve",
                "--db",
                os.path.join(self.tmp.name, "sim.sqlite3"),
                "--port",
                "0",
            ],
            env={**os.environ, "LDPNB_ADMIN_TOKEN": self.admin_token},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline()
        if "listening on " not in line:
            self.__exit__(None, None, None)
            raise RuntimeError(f"the local aggregator did not start: {line!r}")
        self.url = line.split("listening on ")[1].split()[0]
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.tmp.cleanup()


def participant_bodies(spec: CollectionSpec, perturbed: PerturbedInputs) -> list[bytes]:
    """One packed report per person, in training-row order, each with its own random report id."""
    people = np.concatenate(perturbed.people)
    reports = [Report(i, row) for i, rows in enumerate(perturbed.reports) for row in rows]
    return [pack_report(reports[j], spec) for j in np.argsort(people, kind="stable")]


async def create_collection(session: aiohttp.ClientSession, url: str, admin_token: str, spec: CollectionSpec) -> str:
    async with session.post(
        f"{url}/collections",
        json={"spec": spec.to_dict(), "min_reports": 0},
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as response:
        data = await response.json()
        if response.status != 201:
            raise RuntimeError(f"creating the collection failed ({response.status}): {data.get('error')}")
        return data["id"]


async def send_all(url: str, collection_id: str, bodies: list[bytes], clients: int, session, progress: tqdm) -> None:
    """Send every body from its own participant client, at most ``clients`` in flight."""
    next_index = iter(range(len(bodies)))

    async def worker():
        for i in next_index:
            participant = AsyncClient(url, ledger=None, session=session)
            await participant.send_report(collection_id, bodies[i])
            progress.update()

    await asyncio.gather(*(worker() for _ in range(min(clients, len(bodies)))))


@dataclass
class HttpRun(RunResult):
    """A :class:`RunResult` that also says how long the reports took to send."""

    seconds: float = 0.0

    @property
    def reports_per_second(self) -> float:
        return self.n_train / self.seconds


async def _replay(url, admin_token, spec, bodies, clients, estimator, desc) -> tuple:
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        collection_id = await create_collection(session, url, admin_token, spec)
        with tqdm(total=len(bodies), desc=desc, unit="report", delay=1.0) as progress:
            start = time.perf_counter()
            await send_all(url, collection_id, bodies, clients, session, progress)
            seconds = time.perf_counter() - start
        async with session.get(f"{url}/collections/{collection_id}/model", params={"estimator": estimator}) as r:
            data = await r.json()
            if r.status != 200:
                raise RuntimeError(f"fetching the model failed ({r.status}): {data.get('error')}")
    return model_from_dict(data), seconds


def run_over_http(
    dataset: Dataset,
    protocol: str,
    epsilon: float,
    seed: int,
    estimator: str,
    theta: float,
    url: str,
    admin_token: str,
    clients: int,
    setup: Setup | None = None,
) -> HttpRun:
    """One repetition over HTTP against the aggregator at ``url``: a fresh collection, one
    participant client per training row, the model fetched back and scored on the test split."""
    X_train, X_test, y_train, y_test = split(dataset, seed)
    spec = spec_for(dataset, protocol, epsilon, theta, setup, X_train, y_train)
    bodies = participant_bodies(spec, simulate_reports(spec, X_train, y_train, np.random.default_rng(seed)))
    model, seconds = asyncio.run(
        _replay(url, admin_token, spec, bodies, clients, estimator, f"seed {seed}: participants")
    )
    return HttpRun(
        seed,
        {estimator: model.score(X_test, y_test)},
        nonprivate_accuracy(spec, X_train, y_train, X_test, y_test),
        len(y_train),
        seconds=seconds,
    )
