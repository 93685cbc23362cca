"""A hostile aggregator: a real aiohttp proxy in front of the real service that lies the ways a
service can (fresh uids, clones, a raised ε, a spec swapped between fetch and send, 500 after
storing, a connection dropped after receiving). For each, the test counts the ε the device really
spent (every fresh draw of a report spends its collection's ε) and checks it never passes what the
README promises: the app's cap per collection, and its budget per origin."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

import msgpack
import numpy as np
import pytest
from aiohttp import ClientSession, web

from aggregator.app import start_site
from participant import AsyncClient, Budget, BudgetExceeded, CollectionChanged, CollectionSpec, ReportRejected
from participant.client import AlreadyReported, SubmissionFailed, paced_wait
from participant.randomness import SecureGenerator
from participant.reporting import Participant
from protocols import exact
from protocols.noise import GRID

from .conftest import TABLE_1, table_1_spec
from .test_service import sqlite_service  # noqa: F401 (the fixture)

RECORD = dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[0]))
OTHER_RECORD = dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[3]))
SPEC = table_1_spec(protocol="OUE", epsilon=1.0)
MAX_EPSILON, BUDGET = 2.0, Budget(total=3.0, per_days=30)


@dataclass
class Hostile:
    """The lying service: forwards to ``upstream`` and lies as ``mode`` says."""

    upstream: str
    mode: str = "honest"
    session: ClientSession | None = None
    posts: list[bytes] = field(default_factory=list)  # every report body that reached it
    gets: int = 0
    failures_left: int = 2
    epsilon: float = 8.0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "GET":
            self.gets += 1
            async with self.session.get(self.upstream + path) as r:
                data = await r.json()
            if self.mode == "fresh_uid":
                data["uid"] = secrets.token_hex(16)
            if self.mode == "raise_epsilon":
                data["spec"]["epsilon"] = self.epsilon
                data["fingerprint"] = CollectionSpec.from_dict(data["spec"]).fingerprint
            if self.mode == "change_spec" and self.gets > 1:
                data["spec"]["features"][0]["categories"].reverse()
                data["fingerprint"] = CollectionSpec.from_dict(data["spec"]).fingerprint
            return web.json_response(data, status=r.status)
        body = await request.read()
        self.posts.append(body)
        if self.mode == "swap_spec":  # the report goes to a collection of the same shape, other meaning
            path = path.replace("/c1/", "/swapped/")
        async with self.session.post(self.upstream + path, data=body, headers=dict(request.headers)) as r:
            status, answer = r.status, await r.read()
        if self.mode in ("error_after_store", "drop_after_receive") and self.failures_left:
            self.failures_left -= 1
            if self.mode == "drop_after_receive":
                request.transport.abort()
            return web.json_response({"error": "internal error"}, status=500)
        return web.Response(body=answer, status=status, content_type=r.content_type)


@pytest.fixture
async def hostile(sqlite_service):  # noqa: F811
    service = sqlite_service
    liar = Hostile(service.url)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", liar.handle)
    runner, url = await start_site(app)
    async with ClientSession() as session:
        liar.session = session
        yield service, liar, url
    await runner.cleanup()


@pytest.fixture
def draws(monkeypatch) -> list[float]:
    """The ε of every report the device draws (a fresh draw spends its collection's ε)."""
    spent: list[float] = []
    real = Participant.report

    def counted(self, record, group=None):
        spent.append(self.spec.epsilon_per_person)
        return real(self, record, group)

    monkeypatch.setattr(Participant, "report", counted)
    return spent


def device(url, tmp_path, **options) -> AsyncClient:
    options = {"max_epsilon": MAX_EPSILON, "budget": BUDGET, "pace": 0.01, "backoff": 0.01} | options
    return AsyncClient(url, ledger=tmp_path / "ledger.json", **options)


def within_promise(spent: list[float]) -> bool:
    """What the README promises: no draw above the cap, no more than the budget in all."""
    return all(e <= MAX_EPSILON for e in spent) and sum(spent) <= BUDGET.total


async def test_fresh_uids_on_every_fetch_open_no_second_report(hostile, draws, tmp_path):
    service, liar, url = hostile
    liar.mode = "fresh_uid"
    await service.create(SPEC)
    outcomes = []
    async with device(url, tmp_path) as client:
        for _ in range(10):
            try:
                outcomes.append(await client.submit("c1", RECORD))
            except AlreadyReported:
                outcomes.append("refused")
    assert outcomes == ["accepted"] + ["refused"] * 9
    assert draws == [1.0] and len(liar.posts) == 1 and within_promise(draws)
    assert await service.n_reports() == 1


async def test_clones_of_a_collection_get_the_same_randomised_answer_for_nothing(hostile, draws, tmp_path):
    service, liar, url = hostile
    ids = [f"clone{i}" for i in range(10)]
    for cid in ids:
        await service.create(SPEC, cid)
    async with device(url, tmp_path) as client:
        assert [await client.submit(cid, RECORD) for cid in ids] == ["accepted"] * 10
        # A changed record is a fresh draw, and costs its ε again.
        await service.create(SPEC, "after-a-change")
        assert await client.submit("after-a-change", OTHER_RECORD) == "accepted"
    assert draws == [1.0, 1.0] and within_promise(draws)
    sent = [msgpack.unpackb(body) for body in liar.posts]
    assert len({(w["input"], w["value"]) for w in sent[:10]}) == 1  # one answer, ten times
    assert len({w["id"] for w in sent}) == 11  # under fresh ids: copies are not linked by their id


async def test_a_raised_epsilon_is_refused_before_anything_is_drawn(hostile, draws, tmp_path):
    service, liar, url = hostile
    liar.mode = "raise_epsilon"
    await service.create(SPEC)
    async with device(url, tmp_path) as client:
        with pytest.raises(BudgetExceeded, match="asks epsilon=8; this app accepts at most 2"):
            await client.submit("c1", RECORD)
    assert draws == [] and liar.posts == []


async def test_many_collections_within_the_cap_stop_at_the_budget(hostile, draws, tmp_path):
    service, liar, url = hostile
    spent_ok = []
    async with device(url, tmp_path) as client:
        for i, eps in enumerate([1.0, 1.5, 0.5, 0.25, 2.0]):  # each a new spec: no memo applies
            await service.create(table_1_spec(protocol="OUE", epsilon=eps), f"c{i}")
            try:
                await client.submit(f"c{i}", RECORD)
                spent_ok.append(eps)
            except BudgetExceeded as refused:
                assert "would pass this app's total of 3" in str(refused)
    assert spent_ok == [1.0, 1.5, 0.5] and draws == spent_ok and within_promise(draws)


async def test_a_changed_spec_for_a_collection_reported_to_is_refused_on_the_device(hostile, draws, tmp_path):
    service, liar, url = hostile
    liar.mode = "change_spec"
    await service.create(SPEC)
    async with device(url, tmp_path) as client:
        assert await client.submit("c1", RECORD) == "accepted"
        with pytest.raises(CollectionChanged, match="under another spec"):
            await client.submit("c1", RECORD)
    assert draws == [1.0] and len(liar.posts) == 1


async def test_a_spec_swapped_between_fetch_and_send_is_refused_by_the_service(hostile, draws, tmp_path):
    service, liar, url = hostile
    liar.mode = "swap_spec"
    await service.create(SPEC)
    reordered = SPEC.to_dict()
    reordered["features"][0]["categories"].reverse()
    await service.create(CollectionSpec.from_dict(reordered), "swapped")
    async with device(url, tmp_path) as client:
        for _ in range(2):  # the retry re-sends the very same bytes
            with pytest.raises(ReportRejected, match="built for another spec"):
                await client.submit("c1", RECORD)
    assert draws == [1.0] and len(liar.posts) == 2 and liar.posts[0] == liar.posts[1]
    assert await service.n_reports("swapped") == 0


@pytest.mark.parametrize("mode", ["error_after_store", "drop_after_receive"])
async def test_lost_answers_after_storing_are_retried_with_the_same_bytes(hostile, draws, tmp_path, mode):
    service, liar, url = hostile
    liar.mode = mode
    await service.create(SPEC)
    async with device(url, tmp_path, retries=1) as client:
        with pytest.raises(SubmissionFailed):  # two failures: the first submit gives up
            await client.submit("c1", RECORD)
        assert await client.submit("c1", RECORD) == "duplicate"  # stored the first time, counted once
        with pytest.raises(AlreadyReported):
            await client.submit("c1", RECORD)
    assert draws == [1.0] and len(liar.posts) == 3 and len(set(liar.posts)) == 1
    assert await service.n_reports() == 1


# Timing: the moment a report leaves does not depend on the record or the noise.


@pytest.mark.parametrize("elapsed, pace, wait", [
    (0.0, 0.2, 0.2), (0.05, 0.2, 0.15), (0.2, 0.2, 0.0), (0.25, 0.2, 0.15), (0.61, 0.2, 0.19), (0.3, 0, 0.0),
])  # fmt: skip
def test_paced_wait_ends_on_the_next_whole_multiple_of_the_pace(elapsed, pace, wait):
    assert paced_wait(elapsed, pace) == pytest.approx(wait)


@dataclass
class Arrivals:
    """A loopback service that publishes ``spec`` and notes when each answer left and each report arrived."""

    spec: CollectionSpec
    times: list[tuple[str, float]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        if request.method == "GET":
            data = {"id": "c1", "uid": secrets.token_hex(16), "spec": self.spec.to_dict()}
            data["fingerprint"] = self.spec.fingerprint
            self.times.append(("get", loop.time()))
            return web.json_response(data)
        await request.read()
        self.times.append(("post", loop.time()))
        return web.json_response({"status": "accepted"}, status=201)


async def test_a_report_leaves_a_whole_number_of_paces_after_the_spec_whatever_the_draw_took(tmp_path, monkeypatch):
    # A histogram report (exact discrete Laplace: its running time grows with the noise drawn), with
    # the draw slowed down by a record-dependent delay standing in for the worst case.
    spec = table_1_spec(protocol="SHE", epsilon=1.0)
    service = Arrivals(spec)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", service.handle)
    runner, url = await start_site(app)
    real = Participant.report

    def slow(self, record, group=None):
        import time

        time.sleep({"Young": 0.0, "Old": 0.12, "Medium": 0.33}[record["age"]])
        return real(self, record, group)

    monkeypatch.setattr(Participant, "report", slow)
    pace = 0.25
    try:
        for n, age in enumerate(["Young", "Old", "Medium"]):
            async with AsyncClient(url, ledger=tmp_path / f"l{n}.json", pace=pace) as client:
                await client.submit("c1", RECORD | {"age": age})
    finally:
        await runner.cleanup()
    gaps = [post - get for (_, get), (_, post) in zip(service.times[::2], service.times[1::2])]
    # Young and Old leave one pace after the spec; Medium's draw took longer, so it leaves two paces after.
    expected = [pace, pace, 2 * pace]
    assert all(e <= g < e + 0.05 for g, e in zip(gaps, expected)), gaps


class Scripted(SecureGenerator):
    """A secure generator's interface on a seeded stream, counting the random words it hands out."""

    def __init__(self, seed: int):
        self.stream = np.random.default_rng(seed).bit_generator
        self.drawn = 0

    def _words(self, count: int) -> np.ndarray:
        self.drawn += count
        return self.stream.random_raw(count).astype(np.uint64)

    def randbelow(self, n: int) -> int:
        self.drawn += 1
        return int(self.stream.random_raw()) % n if n & (n - 1) == 0 else secrets.randbelow(n)


@pytest.mark.parametrize("protocol", ["DE", "SUE", "OUE"])
def test_the_frequency_oracles_draw_the_same_randomness_for_every_record(protocol):
    spec = table_1_spec(protocol=protocol)
    for seed in range(20):
        drawn = set()
        for row in TABLE_1:
            source = Scripted(seed)
            Participant(spec, rng=source).report(dict(zip(["age", "income", "gender", "missed_payment"], row)))
            drawn.add(source.drawn)
        assert len(drawn) == 1, (seed, drawn)


def test_grid_rounding_draws_one_word_per_value_whatever_the_values():
    for values in (np.zeros(6), np.full(6, 2.0**-1000), np.linspace(-1, 1, 6), np.array([0.3, -0.7, 1, -1, 1e-9, 0.5])):
        source = Scripted(0)
        rounded = exact.round_to_grid(source, values, GRID)
        assert source.drawn == values.size
        assert np.all(np.abs(rounded - values) < GRID)


def test_grid_rounding_moves_up_with_exactly_the_distance_from_the_lower_point():
    # 0.3 lies 0.2 of a step above its lower grid point (to 2^-64): 200,000 coins at 0.2.
    source = Scripted(1)
    up = exact.round_to_grid(source, np.full(200_000, 307.2 * GRID), GRID) > 307 * GRID
    assert abs(up.mean() - 0.2) < 4 * np.sqrt(0.2 * 0.8 / up.size)
