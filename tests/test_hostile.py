"""A hostile aggregator: a real aiohttp proxy in front of the real service that lies the ways a
service can (fresh uids, clones, a raised ε, a spec swapped between fetch and send, 500 after
storing, a connection dropped after receiving). For each, the test counts the ε the device really
spent (every fresh draw of a report spends its collection's ε) and checks it never passes what the
README promises: the app's cap per collection, and its budget for the whole device. It also serves
what a service can send to wear the device down (huge specs and bodies) or to learn more than ε
(clones compared, address spellings), and fuzzes specs and answers."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import secrets
import tracemalloc
import zlib
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import msgpack
import numpy as np
import pytest
from aiohttp import ClientSession, web

from aggregator.service.app import start_site
from participant import AsyncClient, Budget, BudgetExceeded, CollectionChanged, CollectionSpec, ReportRejected
from participant.client import AlreadyReported, SubmissionFailed, pace_from, paced_wait
from participant.errors import LimitExceeded
from participant.ledger import Ledger
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
    real = Participant.draw  # what the client calls, once it validated the record

    def counted(self, record, group=None):
        spent.append(self.spec.epsilon_per_person)
        return real(self, record, group)

    monkeypatch.setattr(Participant, "draw", counted)
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
        # A changed record asked the same question again gets the same answer: the device never
        # tells whether a record changed.
        await service.create(SPEC, "after-a-change")
        assert await client.submit("after-a-change", OTHER_RECORD) == "accepted"
        # A clone that changes only what the device never uses (θ on DE) asks the same question.
        theta = table_1_spec(protocol="OUE", epsilon=1.0, theta=0.3)
        await service.create(theta, "theta")
        assert await client.submit("theta", OTHER_RECORD) == "accepted"
    assert draws == [1.0] and within_promise(draws)
    sent = [msgpack.unpackb(body) for body in liar.posts]
    assert len({(w["input"], w["value"]) for w in sent}) == 1  # one answer, twelve times
    assert len({w["id"] for w in sent}) == 12  # under fresh ids: copies are not linked by their id
    assert sent[-1]["spec"] == theta.fingerprint_digest  # each copy names the spec it answers


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
    real = Participant.draw

    def slow(self, record, group=None):
        import time

        time.sleep({"Young": 0.0, "Old": 0.12, "Medium": 0.33}[record["age"]])
        return real(self, record, group)

    monkeypatch.setattr(Participant, "draw", slow)
    pace = 0.25
    try:
        for n, age in enumerate(["Young", "Old", "Medium"]):
            async with AsyncClient(url, ledger=tmp_path / f"l{n}.json", pace=pace) as client:
                await client.submit("c1", RECORD | {"age": age})
    finally:
        await runner.cleanup()
    gaps = [post - get for (_, get), (_, post) in zip(service.times[::2], service.times[1::2])]
    # Each leaves a whole number of paces after the spec: Young and Old at least one, Medium, whose
    # draw took longer than a pace, at least two (a loaded machine may add a pace, never a fraction).
    paces = [round(g / pace) for g in gaps]
    assert all(abs(g - k * pace) < 0.1 for g, k in zip(gaps, paces)), gaps
    assert paces[0] >= 1 and paces[1] >= 1 and paces[2] >= 2, gaps


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


async def test_the_pace_ends_on_the_precise_clock_not_on_the_event_loops_timer(monkeypatch):
    # A virtual clock that only the precise wait moves: an await on asyncio's own timer (which
    # wakes on whole milliseconds) would leave it where it was.
    clock = [1000.0]
    monkeypatch.setattr("participant.client._monotonic", lambda: clock[0])
    monkeypatch.setattr("participant.client._sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    for started_ago, pace, leaves in [(0.0123456789, 0.2, 0.2), (0.2000001, 0.2, 0.4), (0.05, 0.03, 0.06)]:
        start = clock[0] - started_ago
        await pace_from(start, pace)
        assert clock[0] - start == pytest.approx(leaves, abs=1e-12)


def test_the_one_bit_mean_computes_its_coin_without_a_rational_of_the_value(monkeypatch):
    """Its draw's time must not follow the value: the coin's threshold is computed in fixed point
    on integers of one size, and the same random words are drawn for every value (bench/timing.py
    measures what is left). An exact rational of the value, as before, took longer the more
    binary digits the value has."""
    from fractions import Fraction

    from protocols.mean import OneBitMean

    mechanism = OneBitMean(1.0, 4)
    e = exact.exp_lower(Fraction(1.0))
    lo, hi = mechanism.exact_bounds
    values = np.concatenate([np.random.default_rng(3).uniform(-1, 1, 500), [-1, 1, 0, -0.75, 0.123, 2**-70]])
    wanted = [min(hi, max(lo, exact.threshold_down(Fraction(1, 2) + Fraction(x) * (e - 1) / (e + 1) / 2))) for x in
              values]  # fmt: skip
    got = mechanism.exact_thresholds(values)
    assert max(abs(int(a) - int(b)) for a, b in zip(got, wanted)) <= 3

    def no_rationals(*args):
        raise AssertionError("a rational number built while drawing")

    monkeypatch.setattr("protocols.mean.Fraction", no_rationals)
    drawn = set()
    for x in (-0.75, 0.123, 0.0, 1.0, 2**-70):
        source = Scripted(5)
        mechanism.perturb(np.full((1, 4), x), source)
        drawn.add(source.drawn)
    assert len(drawn) == 1


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


# What a device reveals by repeating itself: a service that clones a collection and compares the
# two reports must learn nothing about whether the record changed in between.


@dataclass
class Publisher:
    """A hostile service on loopback: publishes ``specs`` (by collection id, each with a fresh
    uid on every fetch) and keeps every report body it receives, by collection id."""

    specs: dict[str, CollectionSpec]
    posts: dict[str, list[dict]] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        if request.method == "GET":
            spec = self.specs[cid]
            answer = {"id": cid, "uid": secrets.token_hex(16), "spec": spec.to_dict(), "fingerprint": spec.fingerprint}
            return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")
        self.posts.setdefault(cid, []).append(msgpack.unpackb(await request.read()))
        return web.json_response({"status": "accepted"}, status=201)


@pytest.fixture
async def publisher():
    async def start(specs):
        liar = Publisher(specs)
        app = web.Application()
        app.router.add_route("*", "/collections/{cid}{tail:.*}", liar.handle)
        runner, url = await start_site(app)
        runners.append(runner)
        return liar, url

    runners = []
    yield start
    for runner in runners:
        await runner.cleanup()


PEOPLE = 100


@pytest.mark.parametrize("protocol", ["DE", "OUE", "SHE"])
async def test_comparing_two_clones_tells_a_service_nothing_about_a_changed_record(publisher, tmp_path, protocol):
    spec = table_1_spec(protocol=protocol, epsilon=1.0)
    liar, url = await publisher({"first": spec, "clone": spec, "third": spec})
    rng = np.random.default_rng(7)
    changed = rng.random(PEOPLE) < 0.5  # half the people change their record before the clone
    rows = [dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[i])) for i in range(len(TABLE_1))]

    async def person(i: int) -> None:
        before = rows[i % len(rows)]
        after = rows[(i + 1 + i % 3) % len(rows)] if changed[i] else before
        async with AsyncClient(url, ledger=tmp_path / f"person{i}.json", pace=0.001) as client:
            for cid, record in (("first", before), ("clone", after), ("third", before)):
                await client.submit(cid, record)

    for start in range(0, PEOPLE, 25):
        await asyncio.gather(*(person(i) for i in range(start, start + 25)))
    answers = {cid: [(w["input"], bytes(w["value"]) if isinstance(w["value"], bytes) else w["value"]) for w in ws]
               for cid, ws in liar.posts.items()}  # fmt: skip
    # The posts of one collection arrive in any order: pair them by the person's ledger instead.
    by_person = {}
    for i in range(PEOPLE):
        entries = Ledger(tmp_path / f"person{i}.json").entries()
        by_person[i] = [msgpack.unpackb(base64.b64decode(entries[f"{url} {cid}"]["report"])) for cid in
                        ("first", "clone", "third")]  # fmt: skip
    assert sum(len(a) for a in answers.values()) == 3 * PEOPLE
    # The service's best test: "the record is unchanged when the two reports are equal".
    same = np.array([(r[0]["input"], r[0]["value"]) == (r[1]["input"], r[1]["value"]) for r in by_person.values()])
    right = np.mean(same == ~changed)
    assert abs(right - 0.5) < 3 * np.sqrt(0.25 / PEOPLE), right
    # Records x, x', x: the three answers are one, whatever changed.
    assert all((r[0]["input"], r[0]["value"]) == (r[2]["input"], r[2]["value"]) for r in by_person.values())
    assert all(e["epsilon"] == 0 for i in range(PEOPLE) for k, e in
               json.loads((tmp_path / f"person{i}.json").read_text())["entries"].items() if not k.endswith("first"))


def address_spellings(port: str) -> list[str]:
    """Twelve spellings of 127.0.0.1 at ``port`` (and localhost, another origin to a browser)."""
    return [
        f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://localhost.:{port}", f"http://127.1:{port}",
        f"http://2130706433:{port}", f"http://0x7f000001:{port}", f"http://0177.0.0.1:{port}",
        f"http://[::ffff:127.0.0.1]:{port}", f"http://127.0.0.1:{port}/x/..", f"http://127.0.0.1:{port}/%2e/",
        f"HTTP://127.0.0.1.:{port}//", f"http://user@127.0.0.1:{port}",
    ]  # fmt: skip


async def test_no_spelling_of_an_address_buys_more_than_the_device_budget(hostile, draws, tmp_path):
    service, liar, url = hostile
    liar.mode = "fresh_uid"
    port = url.rsplit(":", 1)[1]
    spellings = address_spellings(port)
    await service.create(SPEC)
    # One collection id under every spelling: one draw per origin (127.0.0.1 and localhost are two,
    # as in a browser: the second gets a fresh draw, counted, never the first's bytes).
    outcomes = []
    for address in spellings:
        async with device(address, tmp_path) as client:
            try:
                outcomes.append(await client.submit("c1", RECORD))
            except AlreadyReported:
                outcomes.append("refused")
    assert draws == [1.0, 1.0] and outcomes[0] == "accepted"
    entries = json.loads((tmp_path / "ledger.json").read_text())["entries"]
    assert {e["origin"] for e in entries.values()} == {f"http://127.0.0.1:{port}", f"http://localhost:{port}"}
    # A new question at every spelling: fresh draws stop at the device's budget (3), all spellings together.
    for i, address in enumerate(spellings):
        await service.create(table_1_spec(protocol="OUE", epsilon=0.75 + i / 100), f"n{i}")
        async with device(address, tmp_path) as client:
            with suppress(BudgetExceeded):
                await client.submit(f"n{i}", RECORD)
    assert sum(draws) <= BUDGET.total and len(draws) == 3 and within_promise(draws)


@asynccontextmanager
async def redirecting_to(elsewhere: str):
    """The URL of a service on loopback that redirects every request to ``elsewhere``."""

    async def redirect(request):
        raise web.HTTPTemporaryRedirect(elsewhere + request.path)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    runner, url = await start_site(app)
    try:
        yield url
    finally:
        await runner.cleanup()


async def test_a_redirect_is_not_followed_and_nothing_is_drawn(publisher, draws, tmp_path):
    liar, elsewhere = await publisher({"c1": SPEC})
    async with redirecting_to(elsewhere) as url:
        async with device(url, tmp_path) as client:
            with pytest.raises(ReportRejected, match="307"):
                await client.submit("c1", RECORD)
    assert draws == [] and liar.posts == {}


# What a service can make a device spend in time and memory: every spec or answer over the app's
# limits is refused before anything is drawn, quickly and in little memory.


@functools.cache
def huge_answer(kind: str) -> bytes | None:
    """The service's answer (msgpack) for one of the resource attacks, or None for those that need a stream."""
    many = [f"v{i}" for i in range(10_000)]
    spec = None
    if kind in ("oue_1e8", "auto_1e8"):  # a 10^8 domain in ~200 KB: 10^4 classes times 10^4 categories
        spec = {"features": [{"name": "f", "categories": many}], "classes": many, "label": "y",
                "protocol": kind[:-4].upper() if kind.startswith("oue") else "auto", "epsilon": 1.0}  # fmt: skip
    elif kind == "oue_1e6":  # 10^6 entries in one input: a 125 KB report of coins
        spec = {"features": [{"name": "f", "categories": many[:1000]}], "classes": many[:1000], "protocol": "OUE",
                "epsilon": 1.0}  # fmt: skip
    elif kind == "she_slow":  # 40,000 noise draws: within max_domain, but seconds of exact Laplace
        spec = {"features": [{"name": "f", "categories": many[:20_000]}], "classes": ["a", "b", "c", "d"],
                "protocol": "SHE", "epsilon": 1.0}  # fmt: skip
    elif kind == "bins":  # 2,000 continuous outputs of 10^4 bins each
        spec = {"continuous": {"inputs": [{"name": f"x{i}", "low": 0, "high": 1} for i in range(2000)],
                               "bins": 10_000}, "classes": ["a", "b"], "protocol": "OUE", "epsilon": 1.0}  # fmt: skip
    elif kind == "many_inputs":  # 50,000 features: a million entries in all
        spec = {"features": [{"name": f"f{i}", "categories": ["a", "b", "c", "d", "e"]} for i in range(50_000)],
                "classes": ["a", "b", "c", "d", "e"], "protocol": "DE", "epsilon": 1.0}  # fmt: skip
    if spec is None:
        return None
    return msgpack.packb({"id": "c1", "uid": "u" * 32, "spec": spec, "fingerprint": "f" * 64})


async def stream_answer(request: web.Request, kind: str) -> web.StreamResponse:
    if kind == "declared_1gb":
        response = web.StreamResponse(headers={"Content-Length": str(2**30)})
        await response.prepare(request)
        await response.write(b"\x80" * 1024)
        return response
    if kind == "gzip_bomb":
        return web.Response(body=gzip_bomb(), headers={"Content-Encoding": "gzip", "Content-Type": "application/msgpack"})
    response = web.StreamResponse()  # 300 MB, chunked, no length
    await response.prepare(request)
    chunk = b"\x00" * 2**20
    for _ in range(300):
        await response.write(chunk)
    return response


@functools.cache
def gzip_bomb() -> bytes:
    """256 MB of zeros, gzipped to 250 KB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\x00" * 2**20
    return b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()


RESOURCE_ATTACKS = ["oue_1e8", "auto_1e8", "oue_1e6", "she_slow", "bins", "many_inputs", "streamed_300mb", "declared_1gb",
                    "gzip_bomb"]  # fmt: skip


@pytest.mark.parametrize("kind", RESOURCE_ATTACKS)
async def test_a_spec_or_answer_over_the_limits_costs_the_device_under_a_tenth_of_a_second_and_50_mb(
    tmp_path, draws, kind
):
    async def answer(request):
        body = huge_answer(kind)
        if body is None:
            return await stream_answer(request, kind)
        return web.Response(body=body, content_type="application/msgpack")

    gzip_bomb(), huge_answer(kind)  # made before the device's time and memory are measured
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    runner, url = await start_site(app)
    try:
        async with AsyncClient(url, ledger=tmp_path / "ledger.json", pace=0.001) as client:
            tracemalloc.start()
            with pytest.raises(LimitExceeded) as refused:
                await client.submit("c1", RECORD)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    finally:
        await runner.cleanup()
    assert draws == [] and not (tmp_path / "ledger.json").exists()
    assert "Limits" in str(refused.value)
    # Read in a bounded stream and refused before anything is built: the memory tells it, whatever
    # the machine's load; the time it takes is bench/device.py's to measure.
    assert peak < 50e6, peak


async def test_pace_zero_is_refused_for_mechanisms_whose_time_follows_their_noise(publisher, draws, tmp_path):
    liar, url = await publisher({"she": table_1_spec(protocol="SHE"), "de": table_1_spec(protocol="DE")})
    async with AsyncClient(url, ledger=tmp_path / "ledger.json", pace=0) as client:
        with pytest.raises(LimitExceeded, match="pace=0"):
            await client.submit("she", RECORD)
        assert draws == []
        assert await client.submit("de", RECORD) == "accepted"  # DE's coins draw the same words whatever the record


# A fuzzer in the service's place: malformed and hostile specs and answers, and the one promise
# that an app catching ParticipantError stays alive whatever it is sent.

CONTINUOUS = {"inputs": [{"name": "x0", "low": 0, "high": 1}, {"name": "x1", "low": -1, "high": 1}]}
BASE_SPECS = [
    *(table_1_spec(protocol=p, epsilon=1.0).to_dict() for p in ("DE", "SUE", "OUE", "SHE", "THE", "auto")),
    {"continuous": {**CONTINUOUS, "bins": 4}, "classes": ["a", "b"], "protocol": "OUE", "epsilon": 1.0},
    *({"continuous": CONTINUOUS, "model": "gaussian", "approach": a, "classes": ["a", "b"], "protocol": "DE",
       "epsilon": 1.0} for a in (1, 2, 3)),
]  # fmt: skip
ODD_VALUES = [None, True, False, -1, 0, 1, 2**70, -(2**70), 1e308, -1e-300, float("nan"), float("inf"), "", "x" * 500,
              "\u0000", [], {}, [[[[]]]], b"\x00\xff", {"name": 1}, ["a"] * 40, [1.5, "b"], {"x": [None]}]  # fmt: skip


def mutated(node, rng):
    """A copy of ``node`` with one random change somewhere inside it."""
    if isinstance(node, dict) and node and rng.random() < 0.8:
        node = dict(node)
        key = list(node)[rng.integers(len(node))]
        roll = rng.random()
        if roll < 0.15:
            del node[key]
        elif roll < 0.25:
            node["extra"] = ODD_VALUES[rng.integers(len(ODD_VALUES))]
        else:
            node[key] = mutated(node[key], rng)
        return node
    if isinstance(node, list) and node and rng.random() < 0.8:
        node = list(node)
        i = int(rng.integers(len(node)))
        roll = rng.random()
        if roll < 0.15:
            del node[i]
        elif roll < 0.3:
            node.append(node[i])  # a repeated category, feature or class
        else:
            node[i] = mutated(node[i], rng)
        return node
    return ODD_VALUES[rng.integers(len(ODD_VALUES))]


def hostile_case(i: int) -> tuple[web.Response, web.Response, dict]:
    """Case ``i``: the service's answer to the fetch, its answer to the report, and the record sent."""
    rng = np.random.default_rng(i)
    base = BASE_SPECS[i % len(BASE_SPECS)]
    spec = base
    for _ in range(int(rng.integers(3))):  # none to two changes
        spec = mutated(spec, rng)
    try:
        fingerprint = CollectionSpec.from_dict(spec).fingerprint  # a spec that parses gets past the fingerprint
    except Exception:  # noqa: BLE001 (this is the fuzzer's own check)
        fingerprint = "0" * 64
    answer = {"id": f"case{i}", "uid": secrets.token_hex(16), "spec": spec, "fingerprint": fingerprint}
    if rng.random() < 0.2:
        answer = mutated(answer, rng)
    body = msgpack.packb(answer, default=str)
    roll = rng.random()
    if roll < 0.05:
        body = body[: int(rng.integers(len(body)))]  # truncated
    elif roll < 0.1:
        body = rng.bytes(int(rng.integers(1, 300)))  # garbage
    status = 200 if rng.random() < 0.85 else int(rng.choice([204, 301, 400, 404, 409, 418]))
    ctype = "application/msgpack" if rng.random() < 0.9 else str(rng.choice(["application/json", "text/html", ""]))
    fetch = web.Response(status=status, body=body, content_type=ctype or None)
    post = web.Response(status=201, body=msgpack.packb({"status": "accepted"}), content_type="application/msgpack")
    if rng.random() < 0.4:
        post_body = rng.choice([msgpack.packb({"status": ["x"]}), b"\xc1", msgpack.packb([1, 2]), b"",
                                msgpack.packb({"error": {"deep": [1] * 10}})])  # fmt: skip
        post = web.Response(status=int(rng.choice([200, 201, 400, 409, 422, 302])), body=post_body,
                            content_type="application/msgpack")  # fmt: skip
    record = RECORD if "features" in base else {"x0": float(rng.random()), "x1": 0.25, "class": "a"}
    return fetch, post, record


FUZZ_CASES = 1200


async def test_no_spec_or_answer_a_service_sends_raises_anything_but_a_participant_error(tmp_path):
    from participant.errors import ParticipantError

    cases = {}

    async def handle(request):
        fetch, post, _ = cases[request.match_info["cid"]]
        return fetch if request.method == "GET" else post

    app = web.Application()
    app.router.add_route("*", "/collections/{cid}{tail:.*}", handle)
    runner, url = await start_site(app)
    outcomes: dict[str, int] = {}
    try:
        for i in range(FUZZ_CASES):
            cases[f"case{i}"] = hostile_case(i)
        async with AsyncClient(url, ledger=None, pace=0.001, retries=0) as client:
            for i in range(FUZZ_CASES):
                client.ledger = Ledger(tmp_path / f"ledger{i}.json")  # a device of its own: no memo, no budget spent
                try:
                    await client.submit(f"case{i}", cases[f"case{i}"][2])
                    outcome = "sent"
                except ParticipantError as refused:
                    outcome = type(refused).__name__
                except Exception as exc:  # noqa: BLE001 (what the test exists to catch)
                    pytest.fail(f"case {i}: {type(exc).__name__}: {exc}")
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        await runner.cleanup()
    # The fuzzer reaches every layer: refused answers, specs, records, budgets and sent reports.
    # A record never raises: whatever it holds, the device reports (undeclared values drawn from the declared).
    assert {"sent", "SpecError", "ClientError", "ReportRejected"} <= set(outcomes) and "RecordError" not in outcomes, outcomes
