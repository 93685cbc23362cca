"""Whether a device reports never depends on its record.

A spec that leaves a category or a class out must not make the devices holding it fall silent:
the service would learn who holds it from who did not report. A value the spec does not declare
(or a missing field) is reported as a value drawn uniformly from the declared ones, inside the
mechanism, so every device sends the same requests whatever its record, and each report is still
ε-LDP for the person. An app that would rather refuse such a spec pins the values it knows.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping

import numpy as np
import pytest
from aiohttp import ClientSession, web
from scipy import stats

from aggregator.service.app import start_site
from participant import AsyncClient, CollectionSpec, Feature, Participant, SpecError
from participant.encoding import joint_encode, record_input
from protocols import make_oracle

from .conftest import table_1_spec
from .js_vectors import HashWords, specs
from .test_participant_js import js_device, survey_site  # noqa: F401 (the fixture)
from .test_service import sqlite_service  # noqa: F401 (the fixture)

FULL = {"age": ["Young", "Medium", "Old"], "income": ["Low", "Medium", "High"], "gender": ["Male", "Female"]}
CLASSES = ["Yes", "No"]


def records_of(spec: CollectionSpec) -> list[dict]:
    """Records holding every kind of value: declared, undeclared, missing, not a string."""
    full = {f.name: f.categories[0] for f in spec.features} | {spec.label: spec.classes[-1]}
    if spec.continuous is not None:
        full = {f.name: (f.low + f.high) / 2 for f in spec.continuous.inputs} | {spec.label: spec.classes[0]}
    out = [full, {}, {name: "not declared" for name in full}, {name: None for name in full}]
    for name in full:
        out += [{k: v for k, v in full.items() if k != name}, {**full, name: float("nan")}, {**full, name: True}]
    return out


@pytest.mark.parametrize("spec", [s for s in specs() if s.budget == "one-report"], ids=lambda s: f"{s.protocol}-{s.model}")
def test_the_draws_a_report_makes_never_depend_on_the_record(spec):
    """The same words give the same input and consume the same number of words whatever the
    record holds: a record never changes what the device draws, only the value randomised."""
    drawn = set()
    for record in records_of(spec):
        source = HashWords(b"silence")
        group = 1 if spec.input_selection == "assigned" else None
        report = Participant(spec, rng=source).report(record, group)
        drawn.add((report.input, source.counter))
    assert len(drawn) == 1, drawn


def test_an_undeclared_value_is_reported_as_a_declared_value_drawn_uniformly():
    """The report of a record holding values the spec leaves out is the mixture, over the declared
    values, of their reports: χ² of 10,000 reports against the exact DE probabilities. A device that
    put the first declared category in place of an undeclared one scores χ² = 494 on them (the
    first class for a missing one, 1,445), where the test fails past 25.7 (p = 1e-4, 5 degrees of
    freedom)."""
    spec = CollectionSpec([Feature("age", ["Young", "Old"])], ["Yes", "No"], "DE", 1.0)
    record = {"age": "Medium", "missed": "x"}  # an undeclared age, and no class at all
    participant = Participant(spec, rng=np.random.default_rng(5))
    draws = 10_000
    observed = np.zeros((2, 4))
    for _ in range(draws):
        report = participant.report(record)
        observed[report.input, int(report.payload)] += 1
    expected = np.zeros((2, 4))
    for i, d in ((0, 2), (1, 4)):  # the class input (k = 2), the age jointly with the class (2 · 2)
        oracle = make_oracle("DE", 1.0, d)
        given = np.full((d, d), oracle.q)
        np.fill_diagonal(given, oracle.p)
        expected[i, :d] = given.mean(axis=0) / 2  # every declared value equally likely; each input half the time
    keep = expected > 0
    assert (observed[~keep] == 0).all()
    assert stats.chisquare(observed[keep], expected[keep] * draws).pvalue > 1e-4


def test_the_device_encodes_a_feature_jointly_with_the_class_as_a_times_k_plus_c():
    spec = table_1_spec()
    for i, feature in enumerate(spec.features, start=1):
        for (a, value), (c, label) in itertools.product(enumerate(feature.categories), enumerate(spec.classes)):
            got = record_input({feature.name: value, spec.label: label}, spec, i, np.random.default_rng(0))
            assert got.tolist() == [a * spec.n_classes + c] == [int(joint_encode(a, c, spec.n_classes))]


class Untouchable(Mapping):
    """A record that fails the test when read."""

    def __getitem__(self, key):
        raise AssertionError(f"the record was read ({key!r})")

    def __iter__(self):
        raise AssertionError("the record was read")

    def __len__(self):
        raise AssertionError("the record was read")


async def test_an_app_pinning_the_values_it_knows_refuses_a_spec_that_lacks_them_before_reading_the_record(
    sqlite_service, tmp_path  # noqa: F811
):
    service = sqlite_service
    narrowed = CollectionSpec([Feature("age", ["Young", "Old"])], CLASSES, "OUE", 1.0, label="missed_payment")
    await service.create(narrowed, "narrowed")
    await service.create(table_1_spec(protocol="OUE"), "full")
    async with AsyncClient(service.url, ledger=tmp_path / "ledger.json", pace=0.01) as client:
        for expected, why in [({"age": FULL["age"]}, re.escape("leaves out ['Medium']")), ({"income": FULL["income"]}, "no categorical field"),
                              ({"missed_payment": ["Yes", "No", "Maybe"]}, re.escape("leaves out ['Maybe']"))]:  # fmt: skip
            with pytest.raises(SpecError, match=why):
                await client.submit("narrowed", Untouchable(), expected=expected)
        record = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "Yes"}
        assert await client.submit("full", record, expected={**FULL, "missed_payment": CLASSES}) == "accepted"
    assert await service.n_reports("narrowed") == 0 and await service.n_reports("full") == 1


# The property: over random hostile specs (values and classes left out, renamed, reordered) and
# random records (declared values, undeclared ones, missing fields), every device of one spec makes
# the same requests, of the same sizes, in Python and in Node.


def hostile_specs(seed: int, count: int) -> list[CollectionSpec]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        features = {name: list(values) for name, values in FULL.items()}
        classes = list(CLASSES) + ["Maybe"]
        for _ in range(int(rng.integers(1, 4))):
            name = str(rng.choice([*features, "class"]))
            values = classes if name == "class" else features[name]
            move = rng.integers(3)
            if move == 0 and len(values) > 2:
                values.pop(int(rng.integers(len(values))))  # a value left out
            elif move == 1:
                j = int(rng.integers(len(values)))
                values[j] = values[j].lower() + "_"  # renamed: the device's value no longer declared
            else:
                rng.shuffle(values)  # reordered
        protocol = str(rng.choice(["DE", "OUE", "SHE"]))
        out.append(CollectionSpec([Feature(n, v) for n, v in features.items()], classes, protocol, 0.5, label="missed_payment"))
    return out


def random_record(rng) -> dict:
    record = {name: str(rng.choice(values + ["Unknown"])) for name, values in FULL.items()}
    record["missed_payment"] = str(rng.choice(CLASSES + ["Maybe", "Unknown"]))
    for name in list(record):
        if rng.random() < 0.15:
            del record[name]
    return record


class Recorder:
    """A proxy in front of the service that writes down every request a device makes: method,
    path (the clone's id replaced by its spec's) and body size, and the answer's status."""

    def __init__(self, upstream: str):
        self.upstream, self.log, self.session = upstream, [], None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        spec_id, _, clone = request.path.split("/")[2].partition("-d")
        path = request.path.replace(f"{spec_id}-d{clone}", spec_id)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with self.session.request(request.method, self.upstream + request.path, data=body, headers=headers) as r:
            answer, ctype = await r.read(), r.content_type
        self.log.append((clone, request.method, path, len(body), r.status))
        return web.Response(body=answer, status=r.status, content_type=ctype)

    def per_device(self) -> dict[str, list[tuple[list, ...]]]:
        """For each spec, every device's requests in order."""
        devices: dict[str, dict[str, list]] = {}
        for clone, method, path, size, status in self.log:
            devices.setdefault(path.split("/")[2], {}).setdefault(clone, []).append((method, path, size, status))
        return {spec: list(by_clone.values()) for spec, by_clone in devices.items()}


@pytest.fixture
async def recorder(sqlite_service):  # noqa: F811
    proxy = Recorder(sqlite_service.url)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner, url = await start_site(app)
    async with ClientSession() as session:
        proxy.session = session
        yield sqlite_service, proxy, url
    await runner.cleanup()


DEVICES = 4


async def hostile_collections(service, seed: int, count: int) -> list[tuple[str, list[dict]]]:
    """``count`` hostile specs, each cloned for :data:`DEVICES` devices, with a random record each:
    ``[(spec id, records)]``; device ``j`` of spec ``s`` reports to collection ``s-dj``."""
    rng = np.random.default_rng(seed + 1)
    out = []
    for s, spec in enumerate(hostile_specs(seed, count)):
        for j in range(DEVICES):
            await service.create(spec, f"s{s:02d}-d{j}")
        out.append((f"s{s:02d}", [random_record(rng) for _ in range(DEVICES)]))
    return out


def assert_one_pattern(proxy: Recorder, count: int) -> None:
    patterns = proxy.per_device()
    assert len(patterns) == count
    for spec_id, devices in patterns.items():
        assert len(devices) == DEVICES and all(d == devices[0] for d in devices), (spec_id, devices)
        assert [m for m, *_ in devices[0]] == ["GET", "POST"] and devices[0][1][3] in (200, 201), devices[0]


async def test_every_python_device_of_a_hostile_spec_makes_the_same_requests_whatever_its_record(recorder, tmp_path):
    service, proxy, url = recorder
    cases = await hostile_collections(service, seed=55, count=12)
    for spec_id, records in cases:
        for j, record in enumerate(records):
            # One spec's devices draw the same words: what differs between them is the record alone.
            rng = HashWords(spec_id.encode())
            async with AsyncClient(url, ledger=tmp_path / f"{spec_id}-{j}.json", pace=0.01, backoff=0.01, rng=rng) as device:
                assert await device.submit(f"{spec_id}-d{j}", record) == "accepted"
    assert_one_pattern(proxy, len(cases))


async def test_every_node_device_of_a_hostile_spec_makes_the_same_requests_whatever_its_record(built, recorder, tmp_path):
    service, proxy, url = recorder
    cases = await hostile_collections(service, seed=56, count=12)
    steps = [[f"{spec_id}-d{j}", record, str(tmp_path / f"{spec_id}-{j}.json"), spec_id]
             for spec_id, records in cases for j, record in enumerate(records)]  # fmt: skip
    outcomes = await js_device(built, url, tmp_path / "unused.json", steps)
    assert outcomes == ["accepted"] * len(steps)
    assert_one_pattern(proxy, len(cases))


async def test_a_node_device_pinning_the_values_it_knows_refuses_a_spec_that_lacks_them(built, sqlite_service, tmp_path):  # noqa: F811
    service = sqlite_service
    narrowed = CollectionSpec([Feature("age", ["Young", "Old"])], CLASSES, "OUE", 1.0, label="missed_payment")
    await service.create(narrowed, "narrowed")
    await service.create(table_1_spec(protocol="OUE"), "full")
    record = {"age": "Medium", "income": "Low", "gender": "Male", "missed_payment": "Yes"}
    outcomes = await js_device(built, service.url, tmp_path / "l.json", [["narrowed", record], ["full", record]],
                               expected={"age": FULL["age"]})  # fmt: skip
    assert outcomes == ["SpecError", "accepted"]
    assert await service.n_reports("narrowed") == 0


async def test_a_survey_page_reports_whatever_the_answer_and_refuses_a_spec_changed_after_it_was_shown(
    built, survey_site, tmp_path
):
    """In Chromium: every answer the page offers is reported, with the same requests; a spec the
    service changes between showing the questions and Send is refused for every answer, nothing
    sent (before, a report arrived exactly when the answer was not the value the new spec left out)."""
    from playwright.async_api import async_playwright, expect

    from .servers import Server
    from .test_participant_js import BROWSER_ARGS, CHROMIUM, create, reports_stored

    page_origin = f"http://127.0.0.1:{survey_site}"
    server = Server(tmp_path / "survey.sqlite3", None, 1, "--allow-origin", page_origin).start()
    shown = CollectionSpec([Feature("age", FULL["age"])], CLASSES, "OUE", 1.0, label="missed_payment")
    changed = CollectionSpec([Feature("age", ["Young", "Old"])], CLASSES, "OUE", 1.0, label="missed_payment")
    swapped: set[str] = set()
    requests: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        """The service, until it swaps a collection's spec for one that leaves an age out."""
        cid = request.path.split("/")[2] if request.path.startswith("/collections/") else ""
        if request.method != "OPTIONS":
            requests.append((cid, f"{request.method} {request.path.replace(cid, 'C')} {request.content_length or 0}"))
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("origin", "content-type", "accept")}
        async with session.request(request.method, server.url + request.path, data=await request.read(), headers=headers) as r:
            body, status = await r.read(), r.status
            passed = {k: v for k, v in r.headers.items() if k.lower().startswith("access-control") or k.lower() in ("content-type", "vary")}
        if cid in swapped and request.method == "GET":
            data = json.loads(body)
            data["spec"], data["fingerprint"] = changed.to_dict(), changed.fingerprint
            body = json.dumps(data).encode()
        return web.Response(body=body, status=status, headers=passed)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner, proxy = await start_site(app)
    answers = list(itertools.product(FULL["age"], CLASSES))
    try:
        async with ClientSession() as session, async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
            for n, (age, label) in enumerate(answers):
                for kind in ("kept", "changed"):
                    cid = f"{kind}{n}"
                    create(server, shown, cid)
                    context = await browser.new_context()  # a fresh profile: a device of its own
                    page = await context.new_page()
                    await page.goto(f"{page_origin}/examples/survey.html?service={proxy}&collection={cid}")
                    await expect(page.locator("#send")).to_be_enabled(timeout=20_000)
                    await page.select_option("#q-age", age)
                    await page.select_option("#q-missed_payment", label)
                    if kind == "changed":
                        swapped.add(cid)
                    await page.click("#send")
                    outcome = "accepted" if kind == "kept" else "SpecError"
                    await expect(page.locator("#status")).to_have_attribute("data-outcome", outcome, timeout=20_000)
                    await context.close()
            await browser.close()
        stored = {kind: [reports_stored(server, f"{kind}{n}") for n in range(len(answers))] for kind in ("kept", "changed")}
    finally:
        await runner.cleanup()
        server.stop()
    assert stored == {"kept": [1] * len(answers), "changed": [0] * len(answers)}
    for kind, wanted in (("kept", ["GET", "GET", "POST"]), ("changed", ["GET", "GET"])):  # shown, then sent
        logs = [[r for c, r in requests if c == f"{kind}{n}"] for n in range(len(answers))]
        assert all(log == logs[0] for log in logs) and [r.split()[0] for r in logs[0]] == wanted, logs


async def test_a_python_form_that_passes_what_it_showed_refuses_a_collection_changed_since(tmp_path):
    """``shown``: the collection fetched when the questions were shown; at submit the service
    publishes another spec (or another collection under the id), and nothing is drawn or sent."""
    shown_spec = CollectionSpec([Feature("age", FULL["age"])], CLASSES, "OUE", 1.0, label="missed_payment")
    changed = CollectionSpec([Feature("age", ["Young", "Old"])], CLASSES, "OUE", 1.0, label="missed_payment")
    answers = [shown_spec, changed]
    posts = []

    async def handle(request: web.Request) -> web.Response:
        if request.method == "POST":
            posts.append(await request.read())
            return web.json_response({"status": "accepted"}, status=201)
        spec = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response({"id": "c1", "uid": "u" * 32, "spec": spec.to_dict(), "fingerprint": spec.fingerprint})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner, url = await start_site(app)
    try:
        async with AsyncClient(url, ledger=tmp_path / "ledger.json", pace=0.001) as client:
            shown = await client.fetch_collection("c1")
            with pytest.raises(SpecError, match="changed after its questions were shown"):
                await client.submit("c1", Untouchable(), shown=shown)
            again = await client.fetch_collection("c1")
            assert await client.submit("c1", {"age": "Old", "missed_payment": "No"}, shown=again) == "accepted"
    finally:
        await runner.cleanup()
    assert len(posts) == 1


async def test_keys_the_spec_does_not_know_are_warned_of_on_the_device_and_change_no_request(recorder, tmp_path):
    """An app that misspells its field names ('Age' for 'age') hears of it in a warning naming the
    keys and the spec's fields; the devices with and without the misspelling make the same
    requests, each accepted (whether and what a device sends never depends on the record's keys:
    a person may skip a question)."""
    from participant import UnknownFields

    service, proxy, url = recorder
    spec = table_1_spec(protocol="OUE")
    for j in range(2):
        await service.create(spec, f"keys-d{j}")
    good = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "Yes"}
    misspelt = {"Age": "Young", "Income": "Low", "Gender": "Male", "Missed_Payment": "Yes"}
    for j, record in enumerate((good, misspelt)):
        rng = HashWords(b"keys")
        async with AsyncClient(url, ledger=tmp_path / f"keys-{j}.json", pace=0.01, backoff=0.01, rng=rng) as device:
            if record is misspelt:
                with pytest.warns(UnknownFields, match=r"'Age', 'Income'.*its fields: 'age', 'income'"):
                    assert await device.submit(f"keys-d{j}", record) == "accepted"
            else:
                assert await device.submit(f"keys-d{j}", record) == "accepted"
    (devices,) = proxy.per_device().values()
    assert len(devices) == 2 and devices[0] == devices[1], devices
