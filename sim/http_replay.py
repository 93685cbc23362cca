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
from aggregator.service.keys import Config
from participant.client import AsyncClient, Published
from participant.errors import ClientError, ParticipantError, SpecError
from participant.reporting import PerturbedInputs, Report
from participant.spec import CollectionSpec
from participant.wire import pack_report

from .datasets import Dataset
from .experiment import (
    RunResult,
    Setup,
    held_out_log_loss,
    majority_accuracy,
    nonprivate_accuracy,
    prior_log_loss,
    simulate_reports,
    spec_for,
    split,
)
from .pacing import Pacer, Refused, send_paced


def connection_caps(clients: int) -> list[str]:
    """``serve`` options under which one process holds ``clients`` connections from one address
    at once (each at least its default): every participant client of a replay connects from
    127.0.0.1, and the per-address cap keeps one address from starving the others."""
    defaults = Config()
    return [
        "--max-connections", str(max(defaults.max_connections, clients + 64)),
        "--max-connections-per-address", str(max(defaults.max_connections_per_address, clients + 64)),
    ]  # fmt: skip


class LocalAggregator:
    """``python -m aggregator serve`` on a free loopback port with a throwaway database, holding
    at least ``clients`` connections at once (:func:`connection_caps`)."""

    def __init__(self, clients: int = 0):
        self.caps = connection_caps(clients)

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
                *self.caps,
            ],
            env={**os.environ, "LDPNB_ADMIN_TOKEN": self.admin_token},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline()
        if "listening on " not in line:
            self.__exit__(None, None, None)
            raise ReplayError(f"the local aggregator did not start: {line!r}")
        self.url = line.split("listening on ")[1].split()[0]
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.tmp.cleanup()


def participant_bodies(spec: CollectionSpec, perturbed: PerturbedInputs, tokens: list[str] | None = None) -> list[bytes]:
    """One packed report per person, in training-row order, each with its own random report id
    (and person ``j``'s enrollment token ``tokens[j]``, if given)."""
    people = np.concatenate(perturbed.people)
    reports = [Report(i, row) for i, rows in enumerate(perturbed.reports) for row in rows]
    order = np.argsort(people, kind="stable")
    return [pack_report(reports[j], spec, tokens[n] if tokens else None) for n, j in enumerate(order)]


class ReplayError(Exception):
    """A replay over HTTP cannot go on (the aggregator refused to create or serve its collection,
    or the collection replayed into does not fit); the message says why (one line)."""


async def create_collection(session: aiohttp.ClientSession, url: str, admin_token: str, spec: CollectionSpec) -> str:
    async with session.post(
        f"{url}/collections",
        json={"spec": spec.to_dict(), "min_reports": 0},
        headers={"Authorization": f"Bearer {admin_token}"},
    ) as response:
        data = await response.json()
        if response.status != 201:
            raise ReplayError(f"creating the collection failed ({response.status}): {data.get('error')}")
        return data["id"]


async def send_all(
    url: str, collection_id: str, bodies: list[bytes], clients: int, session, progress: tqdm, shuffler: str | None = None
) -> None:
    """Send every body from its own participant client, at most ``clients`` in flight (sealed
    bodies to the ``shuffler`` at that URL), all pausing as long as a 429 or 503 asks
    (:mod:`sim.pacing`). Raises :class:`ReplayError` naming the party that refused for good."""
    next_index = iter(range(len(bodies)))
    pacer = Pacer(shuffler.rstrip("/") if shuffler else url, shuffler is not None, len(bodies))

    async def worker():
        for i in next_index:
            participant = AsyncClient(url, ledger=None, session=session, retries=0)
            await send_paced(participant, collection_id, bodies[i], shuffler, pacer)
            progress.update()

    try:
        await asyncio.gather(*(worker() for _ in range(min(clients, len(bodies)))))
    except Refused as exc:
        raise ReplayError(str(exc)) from None


@dataclass
class HttpRun(RunResult):
    """A :class:`RunResult` that also says how long the reports took to send."""

    seconds: float = 0.0

    @property
    def reports_per_second(self) -> float:
        return self.n_train / self.seconds


async def fetch_model(session: aiohttp.ClientSession, url: str, collection_id: str, estimator: str):
    """The collection's model, or ``None`` with the service's reason while it is not released."""
    async with session.get(f"{url}/collections/{collection_id}/model", params={"estimator": estimator}) as r:
        data = await r.json()
        if r.status == 409 and "missing" in data:
            return None, data.get("error", "not released yet")
        if r.status != 200:
            raise ReplayError(f"fetching the model failed ({r.status}): {data.get('error')}")
    return model_from_dict(data), ""


async def _replay(url, admin_token, spec, bodies, clients, estimator, desc) -> tuple:
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        collection_id = await create_collection(session, url, admin_token, spec)
        with tqdm(total=len(bodies), desc=desc, unit="report", delay=1.0) as progress:
            start = time.perf_counter()
            await send_all(url, collection_id, bodies, clients, session, progress)
            seconds = time.perf_counter() - start
        model, _ = await fetch_model(session, url, collection_id, estimator)
    return model, seconds


async def forwarded(session, shuffler: str, collection_id: str, sent: int, timeout: float = 300.0) -> str:
    """Wait until the shuffler forwarded ``sent`` reports of the collection to the aggregator;
    returns "" then, or, when fewer than a batch are left waiting, why the rest stay there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with session.get(f"{shuffler}/collections/{collection_id}") as r:
            state = await r.json(content_type=None)
        left = sent - state.get("forwarded", 0)
        if left <= 0:
            return ""
        if left < state.get("min_batch", 0):  # too few for a batch: nothing more will leave
            return f"{left} reports wait at the shuffler for a batch of {state['min_batch']}"
        await asyncio.sleep(0.2)
    raise ReplayError(f"the shuffler at {shuffler} did not forward the reports within {timeout:g} s")


async def shuffled_view(shuffler: str, collection_id: str, uid: str, spec: CollectionSpec):
    """The collection's view as the shuffler its spec names pinned it, checked against what the
    aggregator published (the simulated devices trust that shuffler, as an app would pin it)."""
    from participant.view import ShuffledView

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{shuffler}/collections/{collection_id}/view") as r:
            data = await r.json(content_type=None)
            if r.status != 200:
                raise ReplayError(f"the shuffler at {shuffler} has no view of {collection_id!r}: {data.get('error')}")
    try:
        view = ShuffledView.from_dict(data)
        view.check_published(collection_id, uid, spec.fingerprint)
    except ParticipantError as exc:
        raise ReplayError(f"collection {collection_id!r}: {exc}") from None
    return view


async def published(url: str, collection_id: str) -> tuple[CollectionSpec, bool, str]:
    """The spec the service publishes for ``collection_id`` (checked against its fingerprint),
    whether the collection takes only enrolled reports, and its uid."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/collections/{collection_id}") as r:
            try:
                data = await r.json(content_type=None)
            except ValueError:
                data = None
            if r.status != 200 or not isinstance(data, dict):
                reason = data.get("error") if isinstance(data, dict) else "not an ldpnb aggregator's answer"
                raise ReplayError(f"collection {collection_id!r} at {url}: {r.status} {reason}")
    try:
        found = Published.from_answer(data)
        return found.spec, bool(data.get("enrollment")), found.uid
    except ClientError as exc:
        raise ReplayError(f"collection {collection_id!r}: {exc}") from None


def replay_into(
    dataset: Dataset,
    url: str,
    collection_id: str,
    spec: CollectionSpec,
    enrollment: bool,
    seed: int,
    estimator: str,
    clients: int,
    tokens: list[str] | None,
    log_loss: bool = False,
    all_rows: bool = False,
    uid: str = "",
) -> tuple[HttpRun, str]:
    """The training split of ``seed`` (with ``all_rows``, every row) replayed into the existing
    collection ``collection_id`` whose published spec is ``spec`` (see :func:`published`): one
    participant per row (with an enrollment token each when the collection requires one), then
    its model scored on the test split (with ``all_rows``, on the rows it learned from). Returns
    the run (accuracy NaN while the collection is not released) and the service's note when it
    is not."""
    if all_rows:
        X_train = X_test = np.asarray(dataset.X, dtype=object)
        y_train = y_test = np.asarray(dataset.y)
    else:
        X_train, X_test, y_train, y_test = split(dataset, seed)
    if enrollment and tokens is None:
        raise ReplayError(
            f"collection {collection_id!r} takes only enrolled reports: pass --tokens FILE "
            f"(python -m aggregator enroll {collection_id} --count {len(y_train)} --out FILE)"
        )
    if tokens is not None and len(tokens) < len(y_train):
        raise ReplayError(f"--tokens holds {len(tokens)} tokens for {len(y_train)} participants")
    try:
        perturbed = simulate_reports(spec, X_train, y_train, np.random.default_rng(seed))
    except ValueError as exc:  # RecordError included: a row the spec does not declare
        raise ReplayError(f"the data do not fit the collection's spec: {exc} (--skip-unknown skips such rows)") from None
    bodies = participant_bodies(spec, perturbed, tokens if enrollment else None)
    shuffler = None
    if spec.shuffle is not None:  # a shuffled collection: every report sealed, sent to its shuffler
        from participant.sealing import check_sealable, seal

        try:
            check_sealable(spec)
        except SpecError as exc:
            raise ReplayError(f"collection {collection_id!r}: {exc}") from None
        shuffler = spec.shuffle.url.rstrip("/")
        view = asyncio.run(shuffled_view(shuffler, collection_id, uid, spec))
        bodies = [seal(body, view) for body in bodies]

    async def send() -> tuple:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
            with tqdm(total=len(bodies), desc=f"into {collection_id}", unit="report") as progress:
                start = time.perf_counter()
                await send_all(url, collection_id, bodies, clients, session, progress, shuffler)
                waiting = await forwarded(session, shuffler, collection_id, len(bodies)) if shuffler else ""
                seconds = time.perf_counter() - start
            model, note = await fetch_model(session, url, collection_id, estimator)
            return model, "; ".join(n for n in (waiting, note) if n), seconds

    model, note, seconds = asyncio.run(send())
    accuracy = model.score(X_test, y_test) if model is not None else float("nan")
    run = HttpRun(
        seed, {estimator: accuracy}, nonprivate_accuracy(spec, X_train, y_train, X_test, y_test), len(y_train),
        majority_accuracy(y_train, y_test),
        **losses(model, estimator, X_test, y_train, y_test, log_loss and model is not None), seconds=seconds,
    )  # fmt: skip
    return run, note


def losses(model, estimator: str, X_test, y_train, y_test, wanted: bool) -> dict:
    """The :class:`RunResult` fields of a fetched ``model``'s test log-loss and the class shares',
    if ``wanted`` (else none)."""
    if not wanted:
        return {}
    return {
        "log_loss": {estimator: held_out_log_loss(model, X_test, y_test)},
        "prior_log_loss": prior_log_loss(y_train, y_test),
    }


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
    log_loss: bool = False,
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
        majority_accuracy(y_train, y_test),
        **losses(model, estimator, X_test, y_train, y_test, log_loss),
        seconds=seconds,
    )
