"""The shuffler between devices and the aggregator, all real processes on loopback: sealed reports
from the Python device, the Node device and the survey page reach the aggregator only in batches
of at least min_batch, in an order independent of their arrival; nothing acknowledged is lost or
counted twice when the shuffler is SIGKILLed or the aggregator is away; a tampered report is
refused and a replayed one counted once; a device refuses a spec whose key it cannot seal to."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import msgpack
import numpy as np
import pytest
from aiohttp import ClientSession, web
from scipy import stats

from aggregator.service.app import start_site
from participant import AsyncClient, CollectionSpec, Feature, Limits, Participant, SpecError
from participant.sealing import open_sealed, seal
from participant.view import ShuffledView
from participant.wire import pack_report

from .servers import ADMIN, AUTH, Server, ShufflerProcess, free_port, token_file
from .test_participant_js import BROWSER_ARGS, CHROMIUM, js_device, survey_site  # noqa: F401 (the fixture)

SPEC = CollectionSpec([Feature("colour", ["red", "blue", "green"])], ["yes", "no"], "OUE", 2.0)
RECORD = {"colour": "blue", "class": "no"}


def call(url: str, method: str = "GET", body: dict | None = None, headers: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def create(
    server: Server, cid: str, shuffler: str, token: str, min_batch: int, spec: CollectionSpec = SPEC, dummies: int = 0
) -> CollectionSpec:
    """A shuffled collection (no dummies unless asked: counts are then the people's); its spec as
    published (the service adds the shuffler and its key)."""
    block = {"url": shuffler, "token": token, "min_batch": min_batch, "dummies": dummies}
    body = {"spec": spec.to_dict(), "id": cid, "min_reports": 1, "shuffler": block}
    call(f"{server.url}/collections", "POST", body, AUTH)
    return CollectionSpec.from_dict(call(f"{server.url}/collections/{cid}")["spec"])


def counted(server: Server, cid: str) -> int:
    return call(f"{server.url}/collections/{cid}/status", headers=AUTH)["reports"]


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory):
    """A real aggregator and a real shuffler releasing every 0.3 s: ``(aggregator, shuffler, token)``,
    shared by the module's tests (starting the pair costs about two seconds of CPU), each under
    collection ids of its own."""
    tmp_path = tmp_path_factory.mktemp("shuffled")
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0")
    shuffler.start()
    yield server, shuffler, token
    shuffler.stop()
    server.stop()


async def submit_all(url: str, cid: str, records: list[dict], tmp_path, shuffler: str) -> list[str]:
    """Each record from a device of its own (its own ledger), pinning ``shuffler``."""
    out = []
    for i, record in enumerate(records):
        async with AsyncClient(url, ledger=tmp_path / f"device{i}.json", pace=0.001, backoff=0.01, shuffler=shuffler,
                               limits=Limits(min_batch=2, min_dummy_share=0)) as device:  # fmt: skip
            out.append(await device.submit(cid, record))
    return out


async def test_python_and_node_devices_report_through_the_shuffler_only_in_batches_of_min_batch(shuffled, built, tmp_path):
    server, shuffler, token = shuffled
    create(server, "py", shuffler.url, token, min_batch=10)
    assert await submit_all(server.url, "py", [RECORD] * 9, tmp_path, shuffler.url) == ["accepted"] * 9
    await asyncio.sleep(1.5)  # five release rounds: nine reports are not a batch of ten
    assert counted(server, "py") == 0 and "waiting" not in call(f"{shuffler.url}/collections/py")  # told nobody
    assert await submit_all(server.url, "py", [RECORD], tmp_path / "tenth", shuffler.url) == ["accepted"]
    await asyncio.to_thread(wait_for, lambda: counted(server, "py") == 10)
    status = call(f"{server.url}/collections/py/status", headers=AUTH)
    assert status["shuffler"] == {"url": shuffler.url, "min_batch": 10, "dummies": 0, "forwarded": 10, "closed": False}
    assert status["batches"] == {"batches": 1, "reports": 10, "dummies": 0, "junk": 0, "smallest": 10}
    # A report sent to the aggregator directly is refused, naming the shuffler.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/collections/py/reports", data=b"\x80", method="POST",
                                                      headers={"Content-Type": "application/msgpack"}), timeout=10)  # fmt: skip
    assert refused.value.code == 409 and shuffler.url in json.load(refused.value)["error"]
    # Node devices, each reporting to a collection and to a clone of it (the same question): the
    # clone gets a fresh draw, its epsilon spent, never the first answer again.
    create(server, "node", shuffler.url, token, min_batch=4)
    create(server, "clone", shuffler.url, token, min_batch=4)
    steps = [[cid, RECORD, str(tmp_path / f"node{i}.json")] for i in range(4) for cid in ("node", "clone")]
    options = {"pace": 0.001, "shuffler": shuffler.url, "budget": {"total": 4.0, "perDays": 30}}
    assert await js_device(built, server.url, tmp_path / "unused.json", steps, **options) == ["accepted"] * 8
    await asyncio.to_thread(wait_for, lambda: counted(server, "node") == 4 and counted(server, "clone") == 4)
    # The Node device's ledger keeps what the budget counts and nothing of a report once it was
    # acknowledged: the Python device reads the entries.
    from participant.ledger import Ledger

    entries = {e["collection"]: e for e in Ledger(tmp_path / "node0.json").entries().values()}
    assert all(e["sent"] and e["sealed"] == e["report"] == "" for e in entries.values())
    assert entries["node"]["epsilon"] == entries["clone"]["epsilon"] == 2.0
    assert entries["node"]["memo_of"] is None and entries["clone"]["memo_of"] is None


def create_spec(server: Server, cid: str) -> CollectionSpec:
    return CollectionSpec.from_dict(call(f"{server.url}/collections/{cid}")["spec"])


async def test_a_survey_page_reports_through_the_shuffler(built, survey_site, tmp_path):  # noqa: F811
    from playwright.async_api import async_playwright, expect

    page_origin = f"http://127.0.0.1:{survey_site}"
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--allow-origin", page_origin).start()
    shuffler = ShufflerProcess(tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3",
                               "--min-batch", "2", "--dummies", "0", "--allow-origin", page_origin).start()  # fmt: skip
    try:
        create(server, "web", shuffler.url, token, min_batch=3)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
            for colour in ("red", "blue", "green"):
                survey_site.config = {"shuffler": shuffler.url, "minBatch": 2, "minDummyShare": 0}
                page = await (await browser.new_context()).new_page()
                await page.goto(f"{page_origin}/examples/survey.html?service={server.url}&collection=web")
                await page.select_option("#q-colour", colour)
                await page.click("#send")
                await expect(page.locator("#status")).to_have_attribute("data-outcome", "accepted", timeout=20_000)
            await browser.close()
        await asyncio.to_thread(wait_for, lambda: counted(server, "web") == 3)
    finally:
        shuffler.stop()
        server.stop()


async def test_nothing_acknowledged_is_lost_or_counted_twice_when_the_shuffler_is_killed_or_the_aggregator_away(tmp_path):
    """The aggregator stopped while a batch is due; the shuffler SIGKILLed with the batch drawn and
    unforwarded, restarted, the aggregator back: every acknowledged report counted once. Then a
    proxy loses the aggregator's answer to a batch it counted, and the shuffler is SIGKILLed
    while the answer is held: the batch is forwarded again and counted once."""
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    lose = {"answers": 0, "hold": 0.0}

    async def proxy(request: web.Request) -> web.StreamResponse:
        async with session.request(request.method, server.url + request.path_qs, data=await request.read(),
                                   headers={k: v for k, v in request.headers.items() if k.lower() != "host"}) as r:  # fmt: skip
            body, status, ctype = await r.read(), r.status, r.content_type
        if request.path.endswith("/shuffled") and lose["answers"]:
            lose["answers"] -= 1
            await asyncio.sleep(lose["hold"])
            request.transport.abort()  # counted, and the answer never arrives
        return web.Response(body=body, status=status, content_type=ctype)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    async with ClientSession() as session:
        runner, proxy_url = await start_site(app)
        port = free_port()
        start = lambda: ShufflerProcess(tmp_path / "shuffler.sqlite3", proxy_url, tmp_path / "token.txt", "--interval",  # noqa: E731
                                        "0.3", "--min-batch", "2", "--dummies", "0", port=port).start()  # fmt: skip
        shuffler = start()
        try:
            create(server, "c", shuffler.url, token, min_batch=5)
            assert await submit_all(server.url, "c", [RECORD] * 5, tmp_path / "a", shuffler.url) == ["accepted"] * 5
            await asyncio.to_thread(wait_for, lambda: counted(server, "c") == 5)
            server.stop()  # the aggregator away: the next batch is drawn and cannot be forwarded
            sealed = [sealed_report(tmp_path) for _ in range(6)]
            for item in sealed:
                assert post_sealed(shuffler.url, "c", item) == 201
            await asyncio.sleep(1.0)  # drawn, forwarding failing
            shuffler.kill()
            server.start()
            shuffler = start()
            await asyncio.to_thread(wait_for, lambda: counted(server, "c") == 11)
            # The answer to the next batch is lost after the aggregator counted it, and the shuffler is
            # killed while it waits for it: restarted, it forwards the batch again.
            lose.update(answers=1, hold=1.0)
            more = [sealed_report(tmp_path) for _ in range(5)]
            for item in more:
                assert post_sealed(shuffler.url, "c", item) == 201
            await asyncio.to_thread(wait_for, lambda: counted(server, "c") == 16)
            shuffler.kill()
            shuffler = start()
            await asyncio.sleep(1.5)
            assert counted(server, "c") == 16 and operator_status(shuffler)["c"]["waiting"] == 0
        finally:
            shuffler.stop()
            server.stop()
            await runner.cleanup()


def operator_status(shuffler: ShufflerProcess) -> dict:
    """``python -m shuffler status --url URL --operator-token-file F --json``, by collection: what
    its operator is told of the running shuffler."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "shuffler", "status", "--url", shuffler.url, "--operator-token-file", shuffler.operator_file, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return {row["id"]: row for row in json.loads(done.stdout)["collections"]}


def sealed_report(tmp_path, min_batch: int = 5) -> bytes:
    """A device's sealed report for collection ``c`` under the view its shuffler pinned (the spec
    and uid read from the aggregator's database, which may be stopped)."""
    import sqlite3

    with sqlite3.connect(tmp_path / "aggregator.sqlite3") as db:
        text, uid = db.execute("SELECT spec, uid FROM collections WHERE id = 'c'").fetchone()
    spec = CollectionSpec.from_json(text)
    view = ShuffledView("c", uid, spec, min_batch, spec.shuffle.dummies)
    return seal(pack_report(Participant(spec).report(RECORD), spec), view)


def post_sealed(shuffler: str, cid: str, sealed: bytes) -> int:
    request = urllib.request.Request(f"{shuffler}/collections/{cid}/reports", data=sealed, method="POST",
                                     headers={"Content-Type": "application/ldpnb-sealed"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


async def test_the_order_the_aggregator_receives_is_independent_of_arrival(tmp_path):
    """A recording aggregator opens the batch of 1,000 it receives: the rank correlation between
    arrival and received order is within noise (|ρ| < 4/√n), and the batch holds them all once."""
    from participant.sealing import new_key_pair

    private, public = new_key_pair()
    spec = CollectionSpec([Feature("colour", ["red", "blue"])], ["y", "n"], "DE", 1.0, shuffle={
        "min_batch": 1000, "delta": 1e-6, "url": "http://127.0.0.1:1",
        "key": {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": public.hex()}})  # fmt: skip
    received: list[bytes] = []

    async def aggregator(request: web.Request) -> web.Response:
        if request.path == "/limits":
            return web.json_response({"max_body_bytes": 64 * 2**20, "max_batch": 10_000})
        if request.method == "GET":
            return web.json_response({"id": "c", "uid": "u" * 32, "spec": spec.to_dict(), "fingerprint": spec.fingerprint})
        received.extend(msgpack.unpackb(await request.read())["reports"])
        return web.json_response({"accepted": len(received)})

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", aggregator)
    runner, url = await start_site(app)
    token_file(tmp_path / "token.txt")
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", url, tmp_path / "token.txt", "--interval", "0.5", "--min-batch", "2", "--dummies", "0",
                               "--per-address", "0").start()  # fmt: skip
    try:
        ids = [i.to_bytes(16, "big") for i in range(1000)]
        participant = Participant(spec)
        view = ShuffledView("c", "u" * 32, spec, 1000, 0)
        sealed = [seal(_with_id(participant, spec, report_id), view) for report_id in ids]
        for part in (sealed[:500], sealed[500:]):  # two requests, arriving in order
            request = urllib.request.Request(f"{shuffler.url}/collections/c/reports", data=msgpack.packb({"reports": part}),
                                             method="POST", headers={"Content-Type": "application/msgpack"})  # fmt: skip
            await asyncio.to_thread(urllib.request.urlopen, request, None, 10)
        await asyncio.to_thread(wait_for, lambda: len(received) == 1000)
    finally:
        shuffler.stop()
        await runner.cleanup()
    order = [int.from_bytes(msgpack.unpackb(open_sealed(s, view, private))["id"], "big") for s in received]
    assert sorted(order) == list(range(1000))
    rho = stats.spearmanr(order, np.arange(1000)).statistic
    assert abs(rho) < 4 / np.sqrt(1000), rho


def _with_id(participant: Participant, spec: CollectionSpec, report_id: bytes) -> bytes:
    from participant.reporting import Report

    drawn = participant.report({"colour": "red", "class": "y"})
    return pack_report(Report(drawn.input, drawn.payload, report_id), spec)


def shuffled_batch(sealed: list[bytes], view: ShuffledView, dummies: int = 0, batch: str = "ab" * 16, size: int | None = None) -> bytes:
    """A shuffler's batch request body for ``view``'s collection."""
    return msgpack.packb({
        "batch": batch, "size": len(sealed) if size is None else size, "dummies": dummies,
        "view": {"min_batch": view.min_batch, "dummies": view.dummies}, "reports": sealed,
    })  # fmt: skip


def post_batch(server: Server, cid: str, body: bytes, token: str) -> dict:
    request = urllib.request.Request(f"{server.url}/collections/{cid}/shuffled", data=body, method="POST",
                                     headers={"Content-Type": "application/msgpack", "Authorization": f"Bearer {token}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


async def test_a_tampered_sealed_report_is_refused_and_a_replayed_one_counted_once(shuffled, tmp_path):
    server, shuffler, token = shuffled
    spec = create(server, "c", shuffler.url, token, min_batch=2)
    view = ShuffledView("c", call(f"{server.url}/collections/c")["uid"], spec, 2, 0)
    good = seal(pack_report(Participant(spec).report(RECORD), spec), view)
    tampered = good[:-1] + bytes([good[-1] ^ 1])
    other = create(server, "d", shuffler.url, token, min_batch=2)  # the same spec: only the collection differs
    misdirected = seal(pack_report(Participant(other).report(RECORD), other), ShuffledView("d", call(f"{server.url}/collections/d")["uid"], other, 2, 0))
    results = post_batch(server, "c", shuffled_batch([good, tampered, good, misdirected, b"short"], view), token)["results"]
    assert [r["status"] for r in results] == ["accepted", "rejected", "duplicate", "rejected", "rejected"]
    assert all(r["reason"] == "sealed" for r in results if r["status"] == "rejected")
    assert counted(server, "c") == 1
    assert call(f"{server.url}/collections/c/status", headers=AUTH)["batches"]["junk"] == 3
    for bearer in (ADMIN, "x" * 40):  # only the collection's shuffler may send it batches
        request = urllib.request.Request(f"{server.url}/collections/c/shuffled", data=shuffled_batch([good], view), method="POST",
                                         headers={"Content-Type": "application/msgpack", "Authorization": f"Bearer {bearer}"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403


async def test_a_device_refuses_a_spec_whose_key_it_cannot_seal_to_before_reading_the_record(built, tmp_path):
    from .test_silence import Untouchable

    bad_keys = [{"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": "zz" * 32}, None]
    answers = {}
    for i, key in enumerate(bad_keys):
        block = {"min_batch": 10, "delta": 1e-6, "url": "http://127.0.0.1:9"} | ({"key": key} if key else {})
        raw = {**SPEC.to_dict(), "shuffle": block}
        fingerprint = "0" * 64 if key else CollectionSpec.from_dict(raw).fingerprint  # a malformed key is no spec at all
        answers[f"c{i}"] = {"id": f"c{i}", "uid": "u" * 32, "spec": raw, "fingerprint": fingerprint}
    posts = []

    async def publisher(request: web.Request) -> web.Response:
        if request.method == "POST":
            posts.append(request.path)
        return web.json_response(answers[request.match_info["cid"]])

    app = web.Application()
    app.router.add_route("*", "/collections/{cid}{tail:.*}", publisher)
    runner, url = await start_site(app)
    try:
        async with AsyncClient(url, ledger=tmp_path / "l.json", pace=0.001, retries=0) as device:
            for cid in answers:
                with pytest.raises(SpecError):
                    await device.submit(cid, Untouchable())
        steps = [[cid, RECORD, str(tmp_path / f"js{cid}.json")] for cid in answers]
        outcomes = await js_device(built, url, tmp_path / "unused.json", steps, retries=0)
        assert outcomes == ["SpecError"] * 2 and posts == []
    finally:
        await runner.cleanup()


async def test_reports_sealed_to_a_rotated_key_still_open(shuffled, tmp_path):
    server, shuffler, token = shuffled
    before = create(server, "old", shuffler.url, token, min_batch=2)
    rotated = call(f"{server.url}/keys", "POST", {}, AUTH)
    after = create(server, "new", shuffler.url, token, min_batch=2)
    assert before.shuffle.key.id != after.shuffle.key.id == rotated["id"]
    assert call(f"{server.url}/keys")["public_key"] == after.shuffle.key.public_key
    assert await submit_all(server.url, "old", [RECORD] * 2, tmp_path, shuffler.url) == ["accepted"] * 2
    await asyncio.to_thread(wait_for, lambda: counted(server, "old") == 2)
