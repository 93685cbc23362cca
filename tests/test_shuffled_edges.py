"""Edges of the shuffled path the other shuffler tests leave open, all real processes on loopback
(the aggregator, the shuffler, the Python and Node devices; a stand-in aggregator or shuffler
where the test must say what a hostile one would):

- a released batch's dummies lie uniformly among its people's reports (SQLite and PostgreSQL
  stores), not behind them;
- the view a shuffler publishes takes the larger of the spec's and its own floor, and of the
  spec's and its own dummies, each on its own; a view whose floor alone, or dummies alone, is
  below the spec's is refused by the aggregator and by devices;
- the shuffler pins no aggregator answer whose fingerprint or id is not the collection's; a device
  refuses a shuffler's view whose stated digest is not the view's;
- the same spec recreated under a new uid is refused by devices and named by the status;
- under a tight --max-body, dummies take room: a view whose floor fits but not with its dummies
  is not pinned, and a release cuts the fewest batches that fit with their dummies; a closing
  batch whose padding uses up the view's dummies is refused whole;
- a batch post that would cross --max-waiting is refused whole;
- junk that opens but is refused is counted as junk, people and dummies apart;
- a device that reported to a collection directly refuses it once it asks for a shuffler.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
from contextlib import closing

import msgpack
import numpy as np
import pytest
from aiohttp import web
from scipy import stats

from aggregator.service.app import start_site
from participant import AsyncClient, CollectionSpec, Participant, ParticipantError
from participant.sealing import new_key_pair, seal, sealed_length
from participant.view import ShuffledView, view_digest
from participant.wire import pack_report
from protocols.shuffling import default_delta, default_dummies

from .conftest import fresh_postgres_url
from .hostile import Proxy
from .servers import AUTH, Server, ShufflerProcess, token_file
from .test_participant_js import js_device
from .test_shuffled_guarantee import FAST, sealed_under, waiting_at_shuffler
from .test_shuffler import RECORD, SPEC, call, counted, create, wait_for
from .test_shuffler_adversary import answer, post_all
from .test_shuffler_bounds import PERMISSIVE

SEALED = {"Content-Type": "application/ldpnb-sealed"}
MSGPACK = {"Content-Type": "application/msgpack"}


async def outcome(url: str, ledger, shuffler: str, cid: str = "c", **options) -> str:
    """One Python device's submit under the permissive test limits: the service's status, or the
    ParticipantError's class name and message."""
    options.setdefault("limits", PERMISSIVE)
    async with AsyncClient(url, ledger=ledger, pace=0.001, backoff=0.01, retries=0, shuffler=shuffler, **options) as device:
        try:
            return await device.submit(cid, RECORD)
        except ParticipantError as exc:
            return f"{type(exc).__name__}: {exc}"


class Stand:
    """A stand-in party on loopback (an aggregator or a shuffler): ``answers`` maps a path to the
    JSON it answers GETs with (status 200, or ``(status, body)``); POSTs are recorded in ``posts``
    and answered ``{"status": "accepted"}`` (201), or 503 while ``down``."""

    def __init__(self):
        self.answers: dict[str, object] = {}
        self.posts: list[str] = []
        self.down = False
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            await request.read()
            self.posts.append(request.path)
            if self.down:
                return web.json_response({"error": "unavailable"}, status=503)
            return web.json_response({"status": "accepted"}, status=201)
        found = self.answers.get(request.path)
        if found is None:
            return web.json_response({"error": "unknown", "reason": "unknown"}, status=404)
        status, body = found if isinstance(found, tuple) else (200, found)
        return web.json_response(body, status=status)

    async def __aenter__(self) -> Stand:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner, self.url = await start_site(app)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def shuffled_spec(url: str, public_key: str, min_batch: int = 2, dummies: int = 2) -> CollectionSpec:
    """SPEC collected through the shuffler at ``url`` and sealed to ``public_key`` (hex)."""
    key = {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": public_key}
    block = {"min_batch": min_batch, "delta": default_delta(min_batch), "url": url, "key": key, "dummies": dummies}
    return CollectionSpec.from_dict({**SPEC.to_dict(), "shuffle": block})


def view_answer(cid: str, uid: str, spec: CollectionSpec, min_batch: int, dummies: int) -> dict:
    """A shuffler's view answer for any floor and dummies (even below the spec's), its digest right."""
    digest = view_digest(cid, uid, spec.fingerprint_digest, min_batch, dummies).hex()
    return {"id": cid, "uid": uid, "fingerprint": spec.fingerprint, "spec": spec.to_dict(), "min_batch": min_batch,
            "dummies": dummies, "digest": digest}  # fmt: skip


@pytest.fixture(scope="module")
def aggregator(tmp_path_factory):
    """One real aggregator (SQLite) for the tests that need nothing of it but collections of their
    own, each under ids no other test uses (:func:`fresh_id`): starting one costs about a second
    of CPU."""
    server = Server(tmp_path_factory.mktemp("shared") / "aggregator.sqlite3").start()
    yield server
    server.stop()


_ids = itertools.count()


def fresh_id() -> str:
    """A collection id no other test on the shared aggregator has used."""
    return f"c{next(_ids)}"


@pytest.fixture(params=["sqlite", "postgres"])
def shuffler_db(request, tmp_path):
    """A shuffler's store: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "s.sqlite3")
    return fresh_postgres_url(request.getfixturevalue("postgres"))


async def test_a_released_batchs_dummies_lie_uniformly_among_its_people(aggregator, shuffler_db, tmp_path):
    """100 people's reports and the view's 100 dummies make one batch: where the dummies lie in
    it is a uniformly random choice of 100 of its 200 places (their ranks against the people's,
    and the runs of dummies and people, as a random draw's), never the end or the start."""
    token = token_file(tmp_path / "token.txt")
    server, cid = aggregator, fresh_id()
    async with Proxy(server.url) as front:
        shuffler = ShufflerProcess(shuffler_db, front.url, tmp_path / "token.txt", *FAST).start()
        try:
            create(server, cid, shuffler.url, token, min_batch=100, dummies=100)
            view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/{cid}/view"))
            assert (view.min_batch, view.dummies) == (100, 100)
            people = [sealed_under(view) for _ in range(100)]
            await asyncio.to_thread(post_all, shuffler.url, cid, people)
            await asyncio.to_thread(wait_for, lambda: len(front.batches) >= 1)
        finally:
            shuffler.stop()
    batch = front.batches[0]
    assert batch["dummies"] == 100 and len(batch["reports"]) == 200 and set(people) <= set(batch["reports"])
    mine = set(people)
    dummy = np.array([report not in mine for report in batch["reports"]])
    assert dummy.sum() == 100
    ranks = stats.mannwhitneyu(np.flatnonzero(dummy), np.flatnonzero(~dummy))
    assert ranks.pvalue > 1e-4, f"the dummies lie apart from the people (p {ranks.pvalue:.2g}): {dummy.astype(int)}"
    # Wald-Wolfowitz: runs of dummies and people as many as a random order has (not alternating, not in blocks).
    n1, n2 = int(dummy.sum()), int((~dummy).sum())
    runs = 1 + int(np.sum(dummy[1:] != dummy[:-1]))
    mean = 2 * n1 * n2 / (n1 + n2) + 1
    sd = np.sqrt(2 * n1 * n2 * (2 * n1 * n2 - n1 - n2) / ((n1 + n2) ** 2 * (n1 + n2 - 1)))
    assert abs(runs - mean) / sd < 3.9, f"{runs} runs of dummies and people, a random order {mean:.0f} ± {sd:.0f}"


async def test_the_published_view_takes_the_larger_floor_and_the_larger_dummies_each_on_its_own(aggregator, tmp_path):
    """A shuffler whose --min-batch (7) is above a spec's floor (3) publishes a view of 7, its
    default dummies a share of that 7; below a spec's floor (10), the spec's 10. Given --dummies
    1, the dummies are the larger of 1 and the spec's, whatever the floor: a spec's floor may be
    the larger while the shuffler's dummies are, and the other way round."""
    token = token_file(tmp_path / "token.txt")
    server = aggregator
    common = ("--interval", "60", "--min-batch", "7", "--per-address", "0")
    by_default = ShufflerProcess(tmp_path / "a.sqlite3", server.url, tmp_path / "token.txt", *common).start()
    given = ShufflerProcess(tmp_path / "b.sqlite3", server.url, tmp_path / "token.txt", *common, "--dummies", "1").start()
    try:
        cases = [  # (shuffler, spec's floor, spec's dummies, the view's floor and dummies)
            (by_default, 3, 0, (7, default_dummies(7))),
            (by_default, 10, 0, (10, default_dummies(10))),
            (given, 3, 0, (7, 1)),
            (given, 10, 0, (10, 1)),
            (given, 10, 4, (10, 4)),
            (given, 3, 5, (7, 5)),
        ]
        for i, (shuffler, floor, dummies, expected) in enumerate(cases):
            cid = fresh_id()
            spec = create(server, cid, shuffler.url, token, min_batch=floor, dummies=dummies)
            published = call(f"{shuffler.url}/collections/{cid}/view")
            view = ShuffledView.from_dict(published)  # its fingerprint and digest checked as a device does
            assert (view.min_batch, view.dummies) == expected, (cid, floor, dummies)
            assert view.spec.fingerprint == spec.fingerprint and (spec.shuffle.min_batch, spec.shuffle.dummies) == (floor, dummies)
            progress = call(f"{shuffler.url}/collections/{cid}")
            assert (progress["min_batch"], progress["dummies"], progress["digest"]) == (*expected, published["digest"])
    finally:
        by_default.stop()
        given.stop()


async def test_a_view_whose_floor_alone_or_dummies_alone_is_below_the_specs_is_refused(aggregator, built, tmp_path):
    """The spec asks batches of 5 people and 2 dummies. A view of 4 people and 3 dummies (the
    floor alone below), or of 6 and 1 (the dummies alone below), is refused: by the aggregator,
    whole, as a batch's view; by the Python and the Node device, as the view their shuffler
    shows, before anything is drawn or sent. A view of 6 and 3 is reported under."""
    token = token_file(tmp_path / "token.txt")
    server, cid = aggregator, fresh_id()
    async with Stand() as shuffler:
        spec = create(server, cid, shuffler.url, token, min_batch=5, dummies=2)
        uid = call(f"{server.url}/collections/{cid}")["uid"]
        sealed = [b"x" * sealed_length(spec)] * 9
        for floor, dummies in ((4, 3), (6, 1)):
            body = msgpack.packb({"batch": "ab" * 16, "size": 9, "dummies": 3, "view": {"min_batch": floor, "dummies": dummies},
                                  "reports": sealed})  # fmt: skip
            status, _, said = await asyncio.to_thread(answer, f"{server.url}/collections/{cid}/shuffled", "POST", body,
                                                      {**MSGPACK, "Authorization": f"Bearer {token}"})  # fmt: skip
            assert status == 409 and b"not this collection's" in said, (floor, dummies, status, said)
            shuffler.answers[f"/collections/{cid}/view"] = view_answer(cid, uid, spec, floor, dummies)
            said = await outcome(server.url, tmp_path / f"py-{floor}.json", shuffler.url, cid)
            assert said.startswith("SpecError") and "below the spec's 5 and 2" in said, said
            ledger = tmp_path / f"node-{floor}.json"
            [said] = await js_device(built, server.url, tmp_path / "unused.json", [[cid, RECORD, str(ledger)]], full=True,
                                     shuffler=shuffler.url, retries=0)  # fmt: skip
            assert said.startswith("SpecError") and "below the spec's 5 and 2" in said, said
            assert not (tmp_path / f"py-{floor}.json").exists() and not ledger.exists()
        assert shuffler.posts == [] and counted(server, cid) == 0
        # At or above the spec's on both counts, the same devices report.
        shuffler.answers[f"/collections/{cid}/view"] = view_answer(cid, uid, spec, 6, 3)
        assert await outcome(server.url, tmp_path / "py-ok.json", shuffler.url, cid) == "accepted"
        steps = [[cid, RECORD, str(tmp_path / "node-ok.json")]]
        assert await js_device(built, server.url, tmp_path / "unused.json", steps, shuffler=shuffler.url, retries=0) == ["accepted"]
        assert shuffler.posts == [f"/collections/{cid}/reports"] * 2


async def test_the_shuffler_pins_no_answer_whose_fingerprint_or_id_is_not_the_collections(tmp_path):
    """An aggregator answers for collection ``forged`` with a spec under another spec's
    fingerprint, and for ``renamed`` with collection ``good``'s answer (its id ``good``): the
    shuffler pins neither (409, not shuffled) and lists no view of them; ``good`` is pinned."""
    token_file(tmp_path / "token.txt")
    public = new_key_pair()[1].hex()
    async with Stand() as aggregator:
        spec = shuffled_spec("http://127.0.0.1:9", public, min_batch=3, dummies=0)
        other = shuffled_spec("http://127.0.0.1:9", public, min_batch=4, dummies=0)  # another spec, its own fingerprint
        good = {"id": "good", "uid": "u" * 32, "spec": spec.to_dict(), "fingerprint": spec.fingerprint}
        aggregator.answers = {
            "/limits": {"max_body_bytes": 2**20, "max_batch": 1000},
            "/collections/good": good,
            "/collections/forged": {**good, "id": "forged", "fingerprint": other.fingerprint},
            "/collections/renamed": good,
        }
        shuffler = ShufflerProcess(tmp_path / "s.sqlite3", aggregator.url, tmp_path / "token.txt", "--interval", "60",
                                   "--min-batch", "2", "--dummies", "0").start()  # fmt: skip
        try:
            for cid in ("forged", "renamed"):
                status, _, body = await asyncio.to_thread(answer, f"{shuffler.url}/collections/{cid}/view")
                assert status == 409 and json.loads(body)["reason"] == "not_shuffled", (cid, status, body)
            status, _, body = await asyncio.to_thread(answer, f"{shuffler.url}/collections/good/view")
            assert status == 200
            view = ShuffledView.from_dict(json.loads(body))
            assert (view.collection, view.uid, view.spec.fingerprint) == ("good", "u" * 32, spec.fingerprint)
            status, _, body = await asyncio.to_thread(answer, f"{shuffler.url}/views")
            assert status == 200 and b"forged" not in body and b"renamed" not in body and b"good" in body
        finally:
            shuffler.stop()
    with closing(sqlite3.connect(tmp_path / "s.sqlite3")) as db:
        assert [row[0] for row in db.execute("SELECT id FROM views")] == ["good"]


async def test_a_device_refuses_a_shuffler_view_whose_stated_digest_is_not_the_views(aggregator, built, tmp_path):
    """The shuffler the app pins answers the collection's true view but states another digest (a
    view it would have reports sealed under): the Python and the Node device refuse before
    anything is drawn or sent; with the digest right, both report."""
    token = token_file(tmp_path / "token.txt")
    server, cid = aggregator, fresh_id()
    async with Stand() as shuffler:
        spec = create(server, cid, shuffler.url, token, min_batch=3, dummies=3)
        uid = call(f"{server.url}/collections/{cid}")["uid"]
        true = view_answer(cid, uid, spec, 3, 3)
        for stated in (view_answer(cid, uid, spec, 3, 4)["digest"], view_answer(cid, "f" * 32, spec, 3, 3)["digest"]):
            shuffler.answers[f"/collections/{cid}/view"] = {**true, "digest": stated}
            said = await outcome(server.url, tmp_path / "py.json", shuffler.url, cid)
            assert said.startswith("ClientError") and "does not match its digest" in said, said
            [said] = await js_device(built, server.url, tmp_path / "unused.json", [[cid, RECORD, str(tmp_path / "node.json")]],
                                     full=True, shuffler=shuffler.url, retries=0)  # fmt: skip
            assert "does not match its digest" in said, said
            assert not (tmp_path / "py.json").exists() and not (tmp_path / "node.json").exists()
        assert shuffler.posts == []
        shuffler.answers[f"/collections/{cid}/view"] = true
        assert await outcome(server.url, tmp_path / "py.json", shuffler.url, cid) == "accepted"
        steps = [[cid, RECORD, str(tmp_path / "node.json")]]
        assert await js_device(built, server.url, tmp_path / "unused.json", steps, shuffler=shuffler.url, retries=0) == ["accepted"]
        assert shuffler.posts == [f"/collections/{cid}/reports"] * 2


async def test_the_same_spec_recreated_under_a_new_uid_is_refused_and_named(tmp_path):
    """The aggregator's database replaced by a fresh one holding the same sealing keys, the
    collection created again under its id with the very same spec (the same fingerprint, a new
    uid): the shuffler keeps the view it pinned, a device refuses, and the aggregator's status
    says the shuffler pinned another collection under this id."""
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST).start()
    fresh = None
    try:
        first = create(server, "d", shuffler.url, token, min_batch=3, dummies=0)
        before = call(f"{server.url}/collections/d")["uid"]
        assert ShuffledView.from_dict(call(f"{shuffler.url}/collections/d/view")).uid == before
        assert "error" not in call(f"{server.url}/collections/d/status", headers=AUTH)["shuffler"]
        server.stop()
        from aggregator.store import open_database

        old, new = await open_database(tmp_path / "aggregator.sqlite3"), await open_database(tmp_path / "fresh.sqlite3")
        await new.set_setting("sealing_keys", await old.get_setting("sealing_keys"))
        await old.close()
        await new.close()
        fresh = Server(tmp_path / "fresh.sqlite3", server.port).start()  # at the same address
        again = create(fresh, "d", shuffler.url, token, min_batch=3, dummies=0)
        assert again.fingerprint == first.fingerprint and call(f"{fresh.url}/collections/d")["uid"] != before
        said = await outcome(fresh.url, tmp_path / "g.json", shuffler.url, "d")
        assert said.startswith("SpecError") and "another identity or spec" in said, said
        status = call(f"{fresh.url}/collections/d/status", headers=AUTH)
        assert "pinned another collection under this id" in status["shuffler"].get("error", ""), status["shuffler"]
        assert waiting_at_shuffler(shuffler.db) == 0
    finally:
        shuffler.stop()
        server.stop()
        if fresh is not None:
            fresh.stop()


async def test_dummies_take_room_in_a_batch_under_a_tight_max_body(tmp_path):
    """The aggregator takes 10 sealed reports a request. A view of 7 people and 4 dummies would
    not fit (its 7 people alone would): it is not pinned (409, too large). A view of 3 people and
    4 dummies leaves room for 6 people a batch: 19 reports posted at once leave in the fewest
    batches that fit with their dummies, 4 (5, 5, 5 and 4 people, 4 dummies each), all counted."""
    token = token_file(tmp_path / "token.txt")
    length = sealed_length(shuffled_spec("http://127.0.0.1:9", new_key_pair()[1].hex()))
    max_body = 512 + 10 * (length + 5) + 20  # ten sealed reports a request (shuffler.views.people_per_batch)
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--max-body", str(max_body)).start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST).start()
    try:
        create(server, "tight", shuffler.url, token, min_batch=7, dummies=4)
        status, _, body = answer(f"{shuffler.url}/collections/tight/view")
        assert status == 409 and json.loads(body)["reason"] == "too_large", (status, body)
        create(server, "b", shuffler.url, token, min_batch=3, dummies=4)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/b/view"))
        assert length == sealed_length(view.spec) and (view.min_batch, view.dummies) == (3, 4)
        post_all(shuffler.url, "b", [sealed_under(view) for _ in range(19)])
        wait_for(lambda: counted(server, "b") == 19 + 4 * 4)
        status = call(f"{server.url}/collections/b/status", headers=AUTH)
        assert (status["people"], status["dummies"]) == (19, 16), status
        assert status["batches"] == {"batches": 4, "reports": 35, "dummies": 16, "junk": 0, "smallest": 4}, status["batches"]
    finally:
        shuffler.stop()
        server.stop()


async def test_a_closing_batch_whose_padding_uses_up_its_views_dummies_is_refused_whole(aggregator, tmp_path):
    """The view holds batches to 5 people and 2 dummies. A closing batch of 3 people's reports and
    2 dummies, both standing in for the people it lacks, has the floor but none of the view's
    dummies: refused whole (409), nothing counted. With 2 dummies more it is counted, people and
    dummies apart."""
    from shuffler.release import sealed_dummies

    token = token_file(tmp_path / "token.txt")
    server, cid = aggregator, fresh_id()
    create(server, cid, "http://127.0.0.1:9", token, min_batch=5, dummies=2)
    published = call(f"{server.url}/collections/{cid}")
    view = ShuffledView(cid, published["uid"], CollectionSpec.from_dict(published["spec"]), 5, 2)
    people = [sealed_under(view) for _ in range(3)]
    dummies = sealed_dummies(view, 4)

    def closing_batch(batch: str, extra: list[bytes], padding: int) -> tuple:
        reports = people + extra
        body = msgpack.packb({"batch": batch, "size": len(reports), "dummies": len(extra), "padding": padding,
                              "view": {"min_batch": 5, "dummies": 2}, "reports": reports})  # fmt: skip
        return answer(f"{server.url}/collections/{cid}/shuffled", "POST", body, {**MSGPACK, "Authorization": f"Bearer {token}"})

    status, _, said = closing_batch("ab" * 16, dummies[:2], padding=2)
    assert status == 409 and b"below what the shuffler's view promises" in said, (status, said)
    assert counted(server, cid) == 0
    status, _, said = closing_batch("cd" * 16, dummies, padding=2)
    assert status == 200 and json.loads(said)["accepted"] == 7, (status, said)
    found = call(f"{server.url}/collections/{cid}/status", headers=AUTH)
    assert (found["reports"], found["people"], found["dummies"]) == (7, 3, 4), found
    assert found["batches"]["batches"] == 1 and found["batches"]["dummies"] == 4


def test_a_batch_post_that_would_cross_the_waiting_cap_is_refused_whole(aggregator, tmp_path):
    """At most 5 reports wait. 3 posted together wait; 3 more posted together would make 6: the
    whole post is refused (429), none of it stored; 2 posted together reach the cap; then even
    one more is refused."""
    token = token_file(tmp_path / "token.txt")
    server, cid = aggregator, fresh_id()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60", "--min-batch", "2",
                               "--dummies", "0", "--max-waiting", "5", "--per-address", "0").start()  # fmt: skip
    try:
        create(server, cid, shuffler.url, token, min_batch=100, dummies=0)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/{cid}/view"))
        post_all(shuffler.url, cid, [sealed_under(view) for _ in range(3)])
        crossing = msgpack.packb({"reports": [sealed_under(view) for _ in range(3)]})
        status, headers, body = answer(f"{shuffler.url}/collections/{cid}/reports", "POST", crossing, MSGPACK)
        assert status == 429 and b"wait for a batch already" in body and int(dict(headers)["Retry-After"]) >= 1, (status, body)
        assert waiting_at_shuffler(shuffler.db) == 3
        post_all(shuffler.url, cid, [sealed_under(view) for _ in range(2)])
        assert waiting_at_shuffler(shuffler.db) == 5
        status, _, body = answer(f"{shuffler.url}/collections/{cid}/reports", "POST", sealed_under(view), SEALED)
        assert status == 429, (status, body)
        assert waiting_at_shuffler(shuffler.db) == 5
    finally:
        shuffler.stop()


async def test_junk_that_opens_but_is_refused_is_junk_and_people_and_dummies_are_counted_apart(database, tmp_path):
    """A batch of 4 people's reports, 3 reports that open under the view but are refused (not
    msgpack, an input out of range, a value of the wrong type) and the view's 3 dummies: the
    aggregator counts 4 people and 3 dummies, 7 reports, and notes 3 junk in a batch of 10 (an
    aggregator on SQLite and on PostgreSQL)."""
    token = token_file(tmp_path / "token.txt")
    server = Server(database).start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST).start()
    try:
        create(server, "c", shuffler.url, token, min_batch=6, dummies=3)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/c/view"))
        assert (view.min_batch, view.dummies) == (6, 3)
        digest = view.spec.fingerprint_digest
        junk = [
            seal(b"\xc1", view),
            seal(msgpack.packb({"id": os.urandom(16), "spec": digest, "input": view.spec.n_inputs, "value": 0}), view),
            seal(msgpack.packb({"id": os.urandom(16), "spec": digest, "input": 0, "value": "x"}), view),
        ]
        people = [seal(pack_report(Participant(view.spec).report(RECORD), view.spec), view) for _ in range(4)]
        post_all(shuffler.url, "c", junk + people)
        wait_for(lambda: counted(server, "c") == 7)
        status = call(f"{server.url}/collections/c/status", headers=AUTH)
        assert (status["reports"], status["people"], status["dummies"]) == (7, 4, 3), status
        assert status["batches"] == {"batches": 1, "reports": 10, "dummies": 3, "junk": 3, "smallest": 7}, status["batches"]
        listed = call(f"{server.url}/collections", headers=AUTH)["collections"][0]
        assert (listed["reports"], listed["people"], listed["dummies"]) == (7, 4, 3)
    finally:
        shuffler.stop()
        server.stop()


async def test_a_collection_reported_to_directly_that_later_asks_for_a_shuffler_is_refused(built, tmp_path):
    """An app pins a shuffler and names ``c`` among its direct collections. The aggregator shows
    ``c`` unshuffled (its shuffler holds no view of it): a Python and a Node device report to it
    directly, acknowledged, and another two draw their report but never hear it acknowledged (the
    aggregator is away). The aggregator then shows ``c`` (the same uid) shuffled through that very
    shuffler, which now serves its view: all four refuse the changed collection (CollectionChanged),
    nothing sealed or sent, the unacknowledged direct report not re-sent anywhere; devices that
    never reported to ``c`` report through the shuffler."""
    from participant.errors import CollectionChanged

    public = new_key_pair()[1].hex()
    async with Stand() as aggregator, Stand() as shuffler:
        uid = "u" * 32
        aggregator.answers["/collections/c"] = {"id": "c", "uid": uid, "spec": SPEC.to_dict(), "fingerprint": SPEC.fingerprint}
        shuffler.answers["/collections/c/view"] = (404, {"error": "no collection c", "reason": "unknown"})
        options = {"shuffler": shuffler.url, "direct": ["c"]}

        async def node(name: str, full: bool = False) -> str:
            steps = [["c", RECORD, str(tmp_path / f"{name}.json")]]
            return (await js_device(built, aggregator.url, tmp_path / "unused.json", steps, full=full, retries=0, **options))[0]

        assert await outcome(aggregator.url, tmp_path / "py.json", **options) == "accepted"
        assert await node("node") == "accepted"
        aggregator.down = True
        assert (await outcome(aggregator.url, tmp_path / "py-unsent.json", **options)).startswith("SubmissionFailed")
        assert await node("node-unsent") == "SubmissionFailed"
        aggregator.down = False
        assert aggregator.posts == ["/collections/c/reports"] * 4 and shuffler.posts == []
        spec = shuffled_spec(shuffler.url, public)
        aggregator.answers["/collections/c"] = {"id": "c", "uid": uid, "spec": spec.to_dict(), "fingerprint": spec.fingerprint}
        shuffler.answers["/collections/c/view"] = ShuffledView("c", uid, spec, 2, 2).to_dict()
        for name in ("py-unsent", "py"):
            said = await outcome(aggregator.url, tmp_path / f"{name}.json", **options)
            assert said.startswith(CollectionChanged.__name__), (name, said)
        for name in ("node-unsent", "node"):
            said = await node(name, full=True)
            assert said.startswith("CollectionChanged"), (name, said)
        assert shuffler.posts == [] and aggregator.posts == ["/collections/c/reports"] * 4
        # The shuffled collection itself is one the same app reports to, from a device new to it.
        assert await outcome(aggregator.url, tmp_path / "py-new.json", **options) == "accepted"
        assert await node("node-new") == "accepted"
        assert shuffler.posts == ["/collections/c/reports"] * 2 and len(aggregator.posts) == 4
