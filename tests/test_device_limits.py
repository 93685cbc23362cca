"""The app's limits at their edges, in both devices: an answer or spec of exactly the limit is
read and one byte more is refused (declared or streamed), an input of exactly ``max_domain``
entries is drawn and one more is refused; the JavaScript device's draw-time limit follows its own
sampler; the memo keys assigned groups apart."""

from __future__ import annotations

import json

import msgpack
import pytest
from aiohttp import web

from aggregator.service.app import start_site
from participant import AsyncClient, CollectionSpec, Feature, Limits
from participant.errors import LimitExceeded

from .test_participant_js import js_device

RECORD = {"f": "v1", "class": "a"}


def spec_answer(spec: CollectionSpec, size: int) -> bytes:
    """The service's msgpack description of ``spec`` padded to exactly ``size`` bytes."""
    answer = {"id": "c1", "uid": "u" * 32, "spec": spec.to_dict(), "fingerprint": spec.fingerprint, "padding": ""}
    base = len(msgpack.packb(answer))
    for pad in range(max(0, size - base - 4), size - base + 1):  # the string's header grows with it
        body = msgpack.packb({**answer, "padding": "x" * pad})
        if len(body) == size:
            return body
    raise AssertionError(f"no padding gives {size} bytes")


def post_answer(size: int) -> bytes:
    body = {"status": "accepted", "padding": ""}
    base = len(json.dumps(body))
    return json.dumps({**body, "padding": "x" * (size - base)}).encode()


@pytest.fixture
async def edge_service():
    """A service answering every spec fetch and report with bodies of the sizes the test sets,
    with a Content-Length or streamed in chunks without one."""
    state = {"spec": b"", "post": b"", "chunked": False}

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        body, ctype = (state["spec"], "application/msgpack") if request.method == "GET" else (state["post"], "application/json")
        if not state["chunked"]:
            return web.Response(body=body, status=200 if request.method == "GET" else 201, content_type=ctype)
        response = web.StreamResponse(status=200 if request.method == "GET" else 201, headers={"Content-Type": ctype})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 1000):
            await response.write(body[start : start + 1000])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner, url = await start_site(app)
    yield state, url
    await runner.cleanup()


SPEC = CollectionSpec([Feature("f", ["v0", "v1", "v2"])], ["a", "b"], "OUE", 1.0)
SPEC_LIMIT, ANSWER_LIMIT = 4096, 512


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "streamed"])
async def test_python_reads_an_answer_of_exactly_the_limit_and_refuses_one_byte_more(edge_service, tmp_path, chunked):
    state, url = edge_service
    state["chunked"] = chunked
    limits = Limits(max_spec_bytes=SPEC_LIMIT, max_answer_bytes=ANSWER_LIMIT)
    for n, (spec_size, post_size, outcome) in enumerate([
        (SPEC_LIMIT, ANSWER_LIMIT, "accepted"), (SPEC_LIMIT + 1, ANSWER_LIMIT, "spec"), (SPEC_LIMIT, ANSWER_LIMIT + 1, "answer"),
    ]):  # fmt: skip
        state["spec"], state["post"] = spec_answer(SPEC, spec_size), post_answer(post_size)
        async with AsyncClient(url, ledger=tmp_path / f"{n}.json", limits=limits, pace=0.001, retries=0) as client:
            if outcome == "accepted":
                assert await client.submit("c1", RECORD) == "accepted"
            else:
                with pytest.raises(LimitExceeded, match=f"{SPEC_LIMIT if outcome == 'spec' else ANSWER_LIMIT} bytes|at most"):
                    await client.submit("c1", RECORD)


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "streamed"])
async def test_node_reads_an_answer_of_exactly_the_limit_and_refuses_one_byte_more(built, edge_service, tmp_path, chunked):
    state, url = edge_service
    state["chunked"] = chunked
    limits = {"maxSpecBytes": SPEC_LIMIT, "maxAnswerBytes": ANSWER_LIMIT}
    outcomes = []
    for n, (spec_size, post_size) in enumerate([(SPEC_LIMIT, ANSWER_LIMIT), (SPEC_LIMIT + 1, ANSWER_LIMIT),
                                                (SPEC_LIMIT, ANSWER_LIMIT + 1)]):  # fmt: skip
        state["spec"], state["post"] = spec_answer(SPEC, spec_size), post_answer(post_size)
        outcomes += await js_device(built, url, tmp_path / f"{n}.json", [["c1", RECORD]], full=True, limits=limits, retries=0)
    assert outcomes[0] == "accepted", outcomes
    assert outcomes[1].startswith("LimitExceeded") and f"{SPEC_LIMIT}" in outcomes[1], outcomes
    assert outcomes[2].startswith("LimitExceeded") and f"{ANSWER_LIMIT}" in outcomes[2], outcomes


def wide(categories: int) -> CollectionSpec:
    return CollectionSpec([Feature("f", [f"v{i}" for i in range(categories)])], ["a", "b"], "OUE", 1.0)


async def test_an_input_of_exactly_max_domain_entries_is_drawn_and_one_more_is_refused(built, edge_service, tmp_path):
    state, url = edge_service
    state["post"] = post_answer(40)
    python, node = [], []
    for n, max_domain in enumerate([64, 63]):  # 32 categories × 2 classes: 64 entries
        state["spec"] = spec_answer(wide(32), 2000)
        async with AsyncClient(url, ledger=tmp_path / f"py{n}.json", limits=Limits(max_domain=max_domain), pace=0.001) as client:
            try:
                python.append(await client.submit("c1", RECORD))
            except LimitExceeded as refused:
                python.append(str(refused))
        node += await js_device(built, url, tmp_path / f"js{n}.json", [["c1", RECORD]], full=True, limits={"maxDomain": max_domain})
    for outcomes in (python, node):
        assert outcomes[0] == "accepted" and "an input of 64 entries" in outcomes[1], outcomes


async def test_the_node_memo_keys_assigned_groups_apart(built, sqlite_service, tmp_path):  # noqa: F811
    """Clones of an assigned collection: the same group gets the first answer again for nothing,
    another group is another question (a fresh draw)."""
    service = sqlite_service
    spec = CollectionSpec([Feature("f", ["v0", "v1", "v2"])], ["a", "b"], "DE", 0.5, input_selection="assigned")
    for cid in ("g1", "g1-clone", "g0", "g0-clone"):
        await service.create(spec, cid)
    ledger = tmp_path / "ledger.json"
    steps = [["g1", RECORD, None, None, 1], ["g1-clone", {"f": "v2", "class": "b"}, None, None, 1],
             ["g0", RECORD, None, None, 0], ["g0-clone", RECORD, None, None, 0]]  # fmt: skip
    assert await js_device(built, service.url, ledger, steps) == ["accepted"] * 4
    entries = json.loads(ledger.read_text())["entries"]
    by_id = {e["collection"]: e for e in entries.values()}
    assert [by_id[c]["epsilon"] for c in ("g1", "g1-clone", "g0", "g0-clone")] == [0.5, 0, 0.5, 0]
    assert by_id["g1-clone"]["memo_of"] == "http://127.0.0.1:{} g1".format(service.url.rsplit(":", 1)[1])
    assert by_id["g0-clone"]["memo_of"].endswith(" g0") and by_id["g0"]["group"] == 0 and by_id["g1"]["group"] == 1


from .test_service import sqlite_service  # noqa: E402, F401 (the fixture)
