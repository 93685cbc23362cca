"""A shuffler's batch is one transaction: its reports, their dummies and its row (issue 78).

A real aggregator, on SQLite and on PostgreSQL, is stopped by the test-only failpoint
``LDPNB_FAILPOINT=after-batch-reports`` (:data:`aggregator.store.base.FAILPOINT`) at the moment a
transaction has written a shuffled batch's reports and their partials and not yet the batch's row
(nor, with it, its dummies), and SIGKILLed there. Restarted, it must show either nothing of the
batch or the whole of it: its reports, its dummies, exactly (people never include them, and a
batch's dummies count whole once, even where it holds a report already counted), and its row
(the status's batches). The shuffler then sends the batch again, as it does every round until
it is acknowledged (the same id and the same sealed bytes, :mod:`shuffler.release`): counted
once, and a second re-send changes nothing.

Two batches: the first all new (SQLite's one-statement insert; PostgreSQL's one statement of
reports, partials and row, after which the failpoint stops it, as if its answer were lost), the
second holding a report of the first again (a device's re-send, re-sealed, in a later batch), so
that it goes the row-by-row way on both databases.
"""

from __future__ import annotations

import json
import threading

import msgpack

from participant import CollectionSpec, Participant
from participant.sealing import seal
from participant.view import ShuffledView
from participant.wire import pack_report
from shuffler.release import sealed_dummies

from .servers import AUTH, MSGPACK, Server, token_file
from .test_shuffler import RECORD, call, create
from .test_shuffler_adversary import answer

FAILPOINT = {"LDPNB_FAILPOINT": "after-batch-reports"}
REACHED = "ldpnb failpoint after-batch-reports reached"
FIELDS = ("reports", "people", "dummies", "batches")


def shown(server: Server) -> dict:
    """What the status says of the batches taken: reports, people, dummies and the batches' rows;
    and ``exact``, the people and dummies the statistics hold (the estimates' unrounded figures,
    which the status rounds to whole people)."""
    status = call(f"{server.url}/collections/c/status", headers=AUTH)
    found = {name: status[name] for name in FIELDS}
    found["exact"] = (0.0, 0.0)
    if status["reports"]:
        estimates = call(f"{server.url}/collections/c/estimates", headers=AUTH)
        found["exact"] = (estimates["reports"] - estimates["dummies"], estimates["dummies"])
    return found


def post(server: Server, body: bytes, token: str) -> tuple:
    return answer(f"{server.url}/collections/c/shuffled", "POST", body, {**MSGPACK, "Authorization": f"Bearer {token}"})


def armed(database: str) -> Server:
    """An aggregator started with the failpoint armed: it serves as any other until a batch arrives."""
    return Server(database, env=FAILPOINT).start()


def killed_at_the_failpoint(database: str, body: bytes, token: str, server: Server | None = None) -> None:
    """Send ``body`` to ``server``, an aggregator with the failpoint armed (one started here when
    None), and SIGKILL it once it stops between the batch's reports and its row."""
    server = server or armed(database)
    reached = threading.Event()

    def watch() -> None:
        for line in server.proc.stderr:
            if REACHED in line:
                reached.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def send() -> None:
        try:
            post(server, body, token)
        except OSError:  # killed under it: no answer
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        assert reached.wait(60), "the aggregator never reached the failpoint"
    finally:
        server.kill()
        sender.join(30)
        server.stop()


def test_a_batch_killed_between_its_reports_and_its_row_is_there_whole_or_not_at_all(database, tmp_path):
    token = token_file(tmp_path / "token.txt")
    opened = armed(database)  # the collection created where the first batch is then killed: one start fewer
    try:
        create(opened, "c", "http://127.0.0.1:9", token, min_batch=3, dummies=2)
        published = call(f"{opened.url}/collections/c")
        assert shown(opened)["reports"] == 0
    except BaseException:
        opened.stop()
        raise
    view = ShuffledView("c", published["uid"], CollectionSpec.from_dict(published["spec"]), 3, 2)
    packed = [pack_report(Participant(view.spec).report(RECORD), view.spec) for _ in range(7)]

    def batch(name: str, people: list[bytes]) -> bytes:
        reports = [seal(p, view) for p in people] + sealed_dummies(view, 2)
        return msgpack.packb({"batch": name, "size": len(reports), "dummies": 2,
                              "view": {"min_batch": 3, "dummies": 2}, "reports": reports})  # fmt: skip

    nothing = {"reports": 0, "people": 0, "dummies": 0, "exact": (0.0, 0.0),
               "batches": {"batches": 0, "reports": 0, "dummies": 0, "junk": 0, "smallest": 0}}  # fmt: skip
    first = {"reports": 6, "people": 4, "dummies": 2, "exact": (4.0, 2.0),
             "batches": {"batches": 1, "reports": 6, "dummies": 2, "junk": 0, "smallest": 4}}  # fmt: skip
    # The second holds the first's fourth report again (a duplicate, nobody new) and 3 people more:
    # its 2 dummies count whole with its row, not 5 of its 6 valid reports' shares of them (1.67).
    both = {"reports": 11, "people": 7, "dummies": 4, "exact": (7.0, 4.0),
            "batches": {"batches": 2, "reports": 12, "dummies": 4, "junk": 0, "smallest": 4}}  # fmt: skip
    batches = [("a1" * 16, batch("a1" * 16, packed[:4]), nothing, first),
               ("b2" * 16, batch("b2" * 16, packed[3:]), first, both)]  # fmt: skip
    for i, (name, body, before, after) in enumerate(batches):
        killed_at_the_failpoint(database, body, token, opened if i == 0 else None)
        server = Server(database).start()
        try:
            found = shown(server)
            assert found in (before, after), f"batch {name} after the kill: {found}, not {before} nor {after}"
            for _ in range(2):  # the shuffler's re-send, then another: counted once
                status, _, said = post(server, body, token)
                assert status == 200, (status, said)
                assert {r["status"] for r in json.loads(said)["results"]} <= {"accepted", "duplicate"}, said
                assert shown(server) == after
        finally:
            server.stop()


async def test_a_batch_wider_than_one_transaction_is_stored_in_one_with_its_row(tmp_path, monkeypatch):
    """A direct request of many reports goes to the database in parts, in as many transactions as
    the writer's caps make (:data:`MAX_GROUPS_PER_TRANSACTION` inputs each); a shuffler's batch
    never does: its 402 reports over 80 inputs (400 people's and 2 dummies) and its row are one
    transaction, so no crash can leave part of it counted."""
    import aiohttp

    from aggregator.service.app import create_app, open_store, start_site
    from aggregator.service.writer import MAX_GROUPS_PER_TRANSACTION
    from aggregator.store import SQLiteStore
    from participant import Feature

    from .servers import ADMIN

    transactions = []
    original = SQLiteStore._transaction

    async def spied(self, merged, notes):
        transactions.append((sum(map(len, merged.values())), [note.batch for note, _ in notes]))
        return await original(self, merged, notes)

    monkeypatch.setattr(SQLiteStore, "_transaction", spied)
    spec = CollectionSpec([Feature(f"f{i}", ["a", "b"]) for i in range(80)], ["yes", "no"], "DE", 2.0)
    record = {"class": "yes", **{f"f{i}": "a" for i in range(80)}}
    store, _ = await open_store(str(tmp_path / "aggregator.sqlite3"), ADMIN)
    runner, url = await start_site(await create_app(store))
    token = token_file(tmp_path / "token.txt")
    try:
        async with aiohttp.ClientSession() as session:
            block = {"url": "http://127.0.0.1:9", "token": token, "min_batch": 3, "dummies": 2}
            body = {"spec": spec.to_dict(), "id": "c", "min_reports": 1, "shuffler": block}
            async with session.post(f"{url}/collections", json=body, headers=AUTH) as r:
                assert r.status == 201, await r.text()
            async with session.get(f"{url}/collections/c") as r:
                published = await r.json()
            view = ShuffledView("c", published["uid"], CollectionSpec.from_dict(published["spec"]), 3, 2)
            people = 400
            packed = [pack_report(Participant(view.spec).report(record), view.spec) for _ in range(people)]
            assert len({msgpack.unpackb(p)["input"] for p in packed}) > MAX_GROUPS_PER_TRANSACTION
            reports = [seal(p, view) for p in packed] + sealed_dummies(view, 2)
            body = msgpack.packb({"batch": "c3" * 16, "size": len(reports), "dummies": 2,
                                  "view": {"min_batch": 3, "dummies": 2}, "reports": reports})  # fmt: skip
            headers = {**MSGPACK, "Authorization": f"Bearer {token}"}
            async with session.post(f"{url}/collections/c/shuffled", data=body, headers=headers) as r:
                assert r.status == 200, await r.text()
                assert (await r.json())["accepted"] == people + 2
            async with session.get(f"{url}/collections/c/status", headers=AUTH) as r:
                status = await r.json()
        assert (status["reports"], status["people"], status["dummies"]) == (people + 2, people, 2), status
        assert status["batches"]["batches"] == 1
        assert transactions == [(people + 2, ["c3" * 16])], transactions
    finally:
        await runner.cleanup()
        await store.close()
