"""The shuffled guarantee against the aggregator it hides people from, tried as a hostile aggregator
and as anonymous clients would, all real processes on loopback (the aggregator, the shuffler, the
Python device, the Node device and the survey page in Chromium):

- a device told its own uid or sealing key by the aggregator refuses to report (one view, pinned
  by the shuffler the app trusts), and the shuffler refuses a report of another view;
- the floor is the shuffler's: shown a lower one, devices refuse; a batch below the view's floor
  is refused whole by the aggregator; a collection recreated under a pinned id is refused; a
  shuffler restarted with a larger floor keeps the larger;
- junk fills no batch silently: it is counted per batch, in status and metrics;
- the shuffler's dummies reach the aggregator inside every batch, indistinguishable, and are
  counted as such;
- nothing links: no answer reused across shuffled collections, and once a batch is released and
  forwarded the shuffler's files hold neither its bytes nor their order;
- one collection's refused batches never delay another's, and batches fit the aggregator's limits.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import urllib.error
import urllib.request
from types import SimpleNamespace

import msgpack
import pytest

from participant import AsyncClient, Limits, SpecError
from participant.sealing import sealed_length
from participant.view import ShuffledView

from .hostile import Proxy
from .servers import AUTH, Server, ShufflerProcess, free_port, token_file, waiting_at
from .test_participant_js import BROWSER_ARGS, CHROMIUM, js_device, survey_site  # noqa: F401 (the fixture)
from .test_shuffler import RECORD, SPEC, call, counted, create, post_batch, shuffled, shuffled_batch, wait_for  # noqa: F401

FAST = ("--interval", "0.3", "--min-batch", "2", "--dummies", "0", "--per-address", "0")


def waiting_at_shuffler(db) -> int:
    """Reports waiting in the shuffler's store (exact, as only its operator is told)."""
    return waiting_at(db)


async def device(url: str, ledger, shuffler: str | None, cid: str = "c", record=RECORD, **options) -> str:
    """One Python device's submit: the service's status, or the ParticipantError's class name."""
    options.setdefault("limits", Limits(min_batch=2, min_dummy_share=0))
    async with AsyncClient(url, ledger=ledger, pace=0.001, backoff=0.01, retries=1, shuffler=shuffler, **options) as client:
        try:
            return await client.submit(cid, record)
        except SpecError as exc:
            return f"SpecError: {exc}"


async def test_a_device_told_its_own_uid_or_key_refuses_and_so_does_the_shuffler(built, survey_site, tmp_path):  # noqa: F811
    """The attack: the aggregator answers one device with a uid (or a sealing key) of its own, so that
    its report alone opens under it. Every device reports under the shuffler's pinned view and
    refuses an aggregator answer that differs: nothing is drawn, spent or sent."""
    from playwright.async_api import async_playwright, expect

    page_origin = f"http://127.0.0.1:{survey_site}"
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--allow-origin", page_origin).start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST, "--allow-origin", page_origin).start()
    try:
        create(server, "c", shuffler.url, token, min_batch=3)
        async with Proxy(server.url) as liar:
            for mode in ("uid", "key"):
                liar.mode = mode
                said = await device(liar.url, tmp_path / f"py-{mode}.json", shuffler.url)
                assert said.startswith("SpecError") and "another identity or spec" in said, said
                assert not (tmp_path / f"py-{mode}.json").exists()  # nothing drawn, nothing recorded
                steps = [["c", RECORD, str(tmp_path / f"js-{mode}.json")]]
                outcome = await js_device(built, liar.url, tmp_path / "unused.json", steps, full=True, shuffler=shuffler.url, retries=1)
                assert outcome[0].startswith("SpecError") and "another identity or spec" in outcome[0], outcome
            # In a browser: the survey page, its service the liar, its shuffler the one the page is configured with.
            liar.mode = "uid"
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
                page = await (await browser.new_context()).new_page()
                survey_site.config = {"shuffler": shuffler.url, "minBatch": 2, "minDummyShare": 0}
                await page.goto(f"{page_origin}/examples/survey.html?service={liar.url}&collection=c")
                await page.click("#send")
                await expect(page.locator("#status")).to_have_attribute("data-outcome", "SpecError", timeout=20_000)
                assert "another identity or spec" in await page.locator("#status").text_content()
                await browser.close()
            assert waiting_at_shuffler(shuffler.db) == 0
            # Honest, the very same devices report (the refusals were the lie's).
            liar.mode = None
            assert await device(liar.url, tmp_path / "py-honest.json", shuffler.url) == "accepted"
            steps = [["c", RECORD, str(tmp_path / "js-honest.json")]]
            assert await js_device(built, liar.url, tmp_path / "unused.json", steps, shuffler=shuffler.url) == ["accepted"]
        # A device that pins no shuffler, or another, reports to no shuffled collection.
        said = await device(server.url, tmp_path / "none.json", None)
        assert said.startswith("SpecError") and "pins no shuffler" in said
        said = await device(server.url, tmp_path / "other.json", f"http://127.0.0.1:{free_port()}")
        assert said.startswith("SpecError") and "this app trusts" in said
        # Sealed bytes of another view (a uid the aggregator handed one device) never reach a batch.
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/c/view"))
        other = ShuffledView("c", "f" * 32, view.spec, view.min_batch, view.dummies)
        forged = other.digest + os.urandom(sealed_length(view.spec) - 32)
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(shuffler.url, "c", forged)
        assert refused.value.code == 400 and "another view" in json.load(refused.value)["error"]
        assert waiting_at_shuffler(shuffler.db) == 2
    finally:
        shuffler.stop()
        server.stop()


async def test_the_floor_is_the_shufflers_and_nobody_lowers_it(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    try:
        async with Proxy(server.url) as liar:
            # Shown a floor of 2 while devices are shown 5, the shuffler pins what it was shown, and
            # devices, comparing the aggregator's answer with the shuffler's view, refuse.
            liar.mode = "floor"
            shuffler = ShufflerProcess(tmp_path / "s.sqlite3", liar.url, tmp_path / "token.txt", *FAST).start()
            try:
                create(server, "c", shuffler.url, token, min_batch=5)
                said = await device(server.url, tmp_path / "d.json", shuffler.url)
                assert said.startswith("SpecError") and "another identity or spec" in said
                assert (await asyncio.to_thread(call, f"{shuffler.url}/collections/c/view"))["min_batch"] == 2
                assert waiting_at_shuffler(shuffler.db) == 0
            finally:
                shuffler.stop()
        # The aggregator refuses, whole, a batch below what the view promises devices.
        shuffler = ShufflerProcess(tmp_path / "s2.sqlite3", server.url, tmp_path / "token.txt", "--interval", "60", "--min-batch", "2", "--dummies", "0").start()
        try:
            spec = create(server, "d", shuffler.url, token, min_batch=5, dummies=2)
            view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/d/view"))
            assert (view.min_batch, view.dummies) == (5, 2)
            for body, why in [
                (shuffled_batch([b"x" * sealed_length(spec)] * 6, view, dummies=2), "below what the shuffler's view promises"),
                (shuffled_batch([b"x" * sealed_length(spec)] * 7, view, dummies=1), "below what the shuffler's view promises"),
                (shuffled_batch([b"x"] * 7, SimpleNamespace(min_batch=2, dummies=0), dummies=0), "not this collection's"),
            ]:
                with pytest.raises(urllib.error.HTTPError) as refused:
                    post_batch(server, "d", body, token)
                assert refused.value.code == 409 and why in json.load(refused.value)["error"]
            assert counted(server, "d") == 0
            # Restarted with a larger floor, the shuffler holds batches to it: 5 waiting are not a batch of 7.
            for i in range(5):
                assert await device(server.url, tmp_path / f"e{i}.json", shuffler.url, "d") == "accepted"
        finally:
            shuffler.stop()
        shuffler = ShufflerProcess(tmp_path / "s2.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3",
                                   "--min-batch", "7", "--dummies", "0", port=shuffler.port).start()  # fmt: skip
        try:
            await asyncio.sleep(1.5)
            assert counted(server, "d") == 0 and call(f"{shuffler.url}/collections/d")["min_batch"] == 7
            for i in range(2):
                assert await device(server.url, tmp_path / f"f{i}.json", shuffler.url, "d") == "accepted"
            await asyncio.to_thread(wait_for, lambda: counted(server, "d") == 9)  # 7 people and 2 dummies
            # The collection recreated under the same id (a fresh aggregator at the same address):
            # the shuffler keeps its view, devices refuse, and the aggregator's status says why.
            server.stop()
            os.remove(tmp_path / "aggregator.sqlite3")
            server.start()
            create(server, "d", shuffler.url, token, min_batch=50)
            said = await device(server.url, tmp_path / "g.json", shuffler.url, "d")
            assert said.startswith("SpecError") and "recreated under the same id" in said
            status = call(f"{server.url}/collections/d/status", headers=AUTH)
            assert "pinned another collection under this id" in status["shuffler"]["error"]
        finally:
            shuffler.stop()
    finally:
        server.stop()


async def test_junk_is_counted_per_batch_and_shown_and_dummies_travel_inside_every_batch(database, tmp_path):
    """Nine reports of random bytes (the view's public digest in front, the right length) and one
    person's make a batch of ten: one person counted, nine junk in status and metrics. With
    dummies, every batch carries them, counted as reports and noted as dummies; the estimates take
    them out (an aggregator on SQLite and on PostgreSQL)."""
    token = token_file(tmp_path / "token.txt")
    server = Server(database).start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST, "--dummies", "3").start()
    try:
        create(server, "c", shuffler.url, token, min_batch=10, dummies=2)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/c/view"))
        assert view.dummies == 3  # the shuffler's own --dummies over the spec's
        for _ in range(9):
            junk = view.digest + os.urandom(sealed_length(view.spec) - 32)
            request = urllib.request.Request(f"{shuffler.url}/collections/c/reports", data=junk, method="POST",
                                             headers={"Content-Type": "application/ldpnb-sealed"})  # fmt: skip
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 201
        assert "waiting" not in call(f"{shuffler.url}/collections/c")  # nobody is told what waits
        assert await device(server.url, tmp_path / "d.json", shuffler.url) == "accepted"
        await asyncio.to_thread(wait_for, lambda: counted(server, "c") == 4)  # the person and 3 dummies
        status = call(f"{server.url}/collections/c/status", headers=AUTH)
        assert status["batches"] == {"batches": 1, "reports": 13, "dummies": 3, "junk": 9, "smallest": 10}
        # People apart from dummies, wherever reports are counted: status, listing, metrics.
        assert (status["reports"], status["people"], status["dummies"], status["released"]) == (4, 1, 3, True)
        listed = call(f"{server.url}/collections", headers=AUTH)["collections"][0]
        assert (listed["reports"], listed["people"], listed["dummies"]) == (4, 1, 3)
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert 'ldpnb_shuffled_junk_total{collection="_all"} 9.0' in metrics
        assert 'ldpnb_shuffled_batches_total{collection="_all"} 1.0' in metrics
        assert "\nldpnb_reports 4.0" in metrics and "\nldpnb_people 1.0" in metrics
        # The estimates are the person's: the dummies' expectation out, their variance in.
        estimates = call(f"{server.url}/collections/c/estimates")
        assert estimates["reports"] == 4 and estimates["dummies"] == 3
        assert sum(i["reports"] for i in estimates["inputs"]) < 4
        # The class input's variance: the people's noise and the dummies' of one batch of 3.
        import numpy as np

        from aggregator.estimation.count_noise import cell_variances
        from participant.dummies import dummy_variance

        first, oracle = estimates["inputs"][0], view.spec.oracles[0]
        people = cell_variances(oracle, first["reports"], np.array(first["estimate"]))
        stated = people + dummy_variance(view.spec, 3)[0]
        assert np.allclose(first["variance"], stated), (first["variance"], stated)
    finally:
        shuffler.stop()
        server.stop()


async def test_no_answer_is_reused_across_shuffled_collections_and_the_store_keeps_nothing_that_links(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    db = tmp_path / "s.sqlite3"
    # A long interval: the reports wait, and the shuffler stopped meanwhile (SIGTERM) writes them
    # from its log into the database file, as a long-running one's checkpoints do.
    shuffler = ShufflerProcess(db, server.url, tmp_path / "token.txt", "--interval", "600", "--min-batch", "2", "--dummies", "0").start()
    try:
        create(server, "a", shuffler.url, token, min_batch=3)
        create(server, "b", shuffler.url, token, min_batch=3)  # the same question
        from participant.ledger import Ledger

        for i in range(3):
            for cid in ("a", "b"):
                assert await device(server.url, tmp_path / f"d{i}.json", shuffler.url, cid, max_epsilon=2.0) == "accepted"
        entries = list(Ledger(tmp_path / "d0.json").entries().values())
        assert [e["epsilon"] for e in entries] == [2.0, 2.0] and all(e["memo_of"] is None for e in entries)
        # And more reports, posted together (enough to fill pages of the store, whose freed space
        # keeps what was written there unless it is overwritten).
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/a/view"))
        more = [sealed_under(view) for _ in range(60)]
        request = urllib.request.Request(f"{shuffler.url}/collections/a/reports", data=msgpack.packb({"reports": more}),
                                         method="POST", headers={"Content-Type": "application/msgpack"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.load(answer)["accepted"] == 60
        shuffler.stop()
        # The devices' sealed reports, as the shuffler holds them (their ledgers keep none once
        # acknowledged), and the ones posted together.
        with sqlite3.connect(db) as conn:
            sealed = [bytes(row[0]) for row in conn.execute("SELECT sealed FROM waiting")]
        assert len(sealed) == 66 and all(item in sealed for item in more)
        assert all(item[32:80] in read_all(db) for item in sealed)  # waiting, in the file: what the check would find
        shuffler = ShufflerProcess(db, server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0", port=shuffler.port).start()
        await asyncio.to_thread(wait_for, lambda: counted(server, "a") == 63 and counted(server, "b") == 3)
        await asyncio.sleep(1.0)  # the round that forwarded the last batch has scrubbed the log
        held = read_all(db)
        assert all(item[32:80] not in held for item in sealed), "a forwarded report's bytes are still in the shuffler's files"
        assert os.path.getsize(str(db) + "-wal") == 0
        # The tables hold nothing that could tell when or from where a report came.
        with sqlite3.connect(db) as conn:
            columns = {
                table: [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
                for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        assert columns == {
            "views": ["id", "uid", "spec", "min_batch", "dummies", "forwarded"],
            "seen": ["collection", "digest", "released"],
        "waiting": ["collection", "digest", "sealed"],
            "batches": ["id", "name", "collection", "people", "dummies", "padding"],
            "batch_reports": ["batch", "position", "sealed"],
            "closed": ["collection"],
        }
    finally:
        shuffler.stop()
        server.stop()


def read_all(db) -> bytes:
    """Every byte of the shuffler's store files (the database, its log and shared memory)."""
    return b"".join(open(p, "rb").read() for p in (str(db), str(db) + "-wal", str(db) + "-shm") if os.path.exists(p))


async def test_one_collections_refused_batches_never_delay_anothers_and_batches_fit_the_aggregators_body(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--max-body", "4000").start()
    try:
        async with Proxy(server.url) as liar:
            shuffler = ShufflerProcess(tmp_path / "s.sqlite3", liar.url, tmp_path / "token.txt", *FAST).start()
            try:
                spec = create(server, "a", shuffler.url, token, min_batch=3)
                create(server, "b", shuffler.url, token, min_batch=3)
                liar.refuse.add("a")
                for i in range(3):
                    assert await device(server.url, tmp_path / f"a{i}.json", shuffler.url, "a") == "accepted"
                await asyncio.sleep(1.0)  # a's batch refused at every round
                per_request = (4000 - 512) // (sealed_length(spec) + 5)
                many = per_request * 3 + 1
                # Posted at once, they wait together: the release cuts them into batches that fit.
                # (Off the loop: the proxy the shuffler pins through runs on it.)
                view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/b/view"))
                sealed = [sealed_under(view) for _ in range(many)]
                request = urllib.request.Request(f"{shuffler.url}/collections/b/reports", data=msgpack.packb({"reports": sealed}),
                                                 method="POST", headers={"Content-Type": "application/msgpack"})  # fmt: skip
                answer = await asyncio.to_thread(urllib.request.urlopen, request, None, 10)
                assert json.load(answer)["accepted"] == many
                await asyncio.to_thread(wait_for, lambda: counted(server, "b") == many)
                batches = call(f"{server.url}/collections/b/status", headers=AUTH)["batches"]
                assert batches["batches"] == 4 and batches["smallest"] >= 3 and batches["reports"] == many  # the fewest that fit
                assert counted(server, "a") == 0 and liar.seen[("POST", "/collections/a/shuffled")] >= 2
                assert "413" in (await asyncio.to_thread(call, f"{shuffler.url}/collections/a"))["problem"]
                liar.refuse.clear()
                await asyncio.to_thread(wait_for, lambda: counted(server, "a") == 3)
            finally:
                shuffler.stop()
    finally:
        server.stop()


def sealed_under(view: ShuffledView) -> bytes:
    """One device's sealed report under ``view`` (built, not sent)."""
    from participant import Participant
    from participant.sealing import seal
    from participant.wire import pack_report

    return seal(pack_report(Participant(view.spec).report(RECORD), view.spec), view)


def post(shuffler: str, cid: str, sealed: bytes) -> int:
    request = urllib.request.Request(f"{shuffler}/collections/{cid}/reports", data=sealed, method="POST",
                                     headers={"Content-Type": "application/ldpnb-sealed"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status
