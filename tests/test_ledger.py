"""The device's ledger: one report per collection whatever address, thread or process sends it,
and nothing sent when the ledger cannot be trusted."""

import asyncio
import json
import multiprocessing
import os
import stat
import threading
import time

import pytest

from participant.client import AlreadyReported, AsyncClient, Client, Ledger, LedgerError

from .conftest import TABLE_1, table_1_spec
from .test_service import service  # noqa: F401 (the fixture)

RECORD = dict(zip(["age", "income", "gender", "missed_payment"], TABLE_1[0]))


def variants(url: str) -> list[str]:
    """The same service under other names: host name, scheme case, trailing slash."""
    port = url.rsplit(":", 1)[1]
    return [url, f"http://localhost:{port}", f"HTTP://127.0.0.1:{port}/", f"http://127.0.0.1:{port}//"]


async def test_no_address_opens_a_second_report(service, tmp_path):  # noqa: F811
    await service.create(table_1_spec(protocol="OUE"))
    ledger = tmp_path / "ledger.json"
    outcomes = []
    for url in variants(service.url):
        async with AsyncClient(url, ledger=ledger) as client:
            try:
                outcomes.append(await client.submit("c1", RECORD))
            except AlreadyReported:
                outcomes.append("refused")
    assert outcomes == ["accepted", "refused", "refused", "refused"]
    assert await service.n_reports() == 1
    entries = json.loads(ledger.read_text())
    assert list(entries) == [(await service.collection()).uid]
    assert stat.S_IMODE(os.stat(ledger).st_mode) == 0o600


async def test_threads_sharing_a_ledger_send_one_report(service, tmp_path):  # noqa: F811
    await service.create(table_1_spec(protocol="OUE"))
    ledger = tmp_path / "ledger.json"
    outcomes, barrier = [], threading.Barrier(8)

    def submit():
        barrier.wait()
        try:
            outcomes.append(Client(service.url, ledger=ledger).submit("c1", RECORD))
        except AlreadyReported:
            outcomes.append("refused")

    threads = [threading.Thread(target=submit) for _ in range(8)]
    await asyncio.to_thread(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    assert len(outcomes) == 8 and set(outcomes) <= {"accepted", "duplicate", "refused"}
    assert outcomes.count("accepted") == 1
    assert await service.n_reports() == 1  # one report, however many threads sent it
    assert not list(tmp_path.glob("*.tmp"))


def _submit_from_process(url, ledger, queue):
    try:
        queue.put(Client(url, ledger=ledger).submit("c1", RECORD))
    except AlreadyReported:
        queue.put("refused")


async def test_processes_sharing_a_ledger_send_one_report(service, tmp_path):  # noqa: F811
    await service.create(table_1_spec(protocol="DE"))
    ledger = str(tmp_path / "ledger.json")
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_submit_from_process, args=(service.url, ledger, queue)) for _ in range(4)]
    for p in processes:
        p.start()
    outcomes = [await asyncio.to_thread(queue.get, True, 60) for _ in processes]
    for p in processes:
        await asyncio.to_thread(p.join, 30)
    assert outcomes.count("accepted") == 1, outcomes
    assert await service.n_reports() == 1


@pytest.mark.parametrize(
    "content",
    [
        '{"abc": {"report": "AAAA", "sent": fal',  # truncated
        "\x00\x01garbage",
        "[1, 2, 3]",
        '{"abc": {"report": 5, "sent": false}}',
        '{"abc": {"report": "AAAA", "sent": "no"}}',
        '{"abc": "entry"}',
    ],
)
async def test_a_corrupted_ledger_raises_ledger_error_and_sends_nothing(service, tmp_path, content):  # noqa: F811
    await service.create(table_1_spec(protocol="OUE"))
    ledger = tmp_path / "ledger.json"
    ledger.write_text(content)
    async with AsyncClient(service.url, ledger=ledger) as client:
        with pytest.raises(LedgerError, match=str(ledger)):
            await client.submit("c1", RECORD)
    assert await service.n_reports() == 0
    assert ledger.read_text() == content  # left for the app to inspect, never overwritten


async def test_the_sync_client_works_inside_a_running_event_loop(service, tmp_path):  # noqa: F811
    await service.create(table_1_spec(protocol="OUE"))

    async def app_code():
        # An app's coroutine calling the sync client: its thread's loop is running.
        first = Client(service.url, ledger=tmp_path / "l.json").submit("c1", RECORD)
        with pytest.raises(AlreadyReported):
            Client(service.url, ledger=tmp_path / "l.json").submit("c1", RECORD)
        return first

    # The app's loop runs in its own thread (the service's loop is this one).
    assert await asyncio.to_thread(asyncio.run, app_code()) == "accepted"


def test_claim_returns_the_first_report_to_everyone(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    bodies = iter([b"first", b"second"])
    assert ledger.claim("uid", lambda: next(bodies)) == (b"first", False)
    assert ledger.claim("uid", lambda: next(bodies)) == (b"first", False)
    ledger.mark_sent("uid")
    assert ledger.claim("uid", lambda: next(bodies)) == (b"first", True)


def test_the_ledger_records_when_and_what_and_replaces_its_file_atomically(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    replaced = []
    real_replace = os.replace

    def replace(src, dst):
        replaced.append((os.path.dirname(src), os.path.basename(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr("participant.client.os.replace", replace)
    before = time.time()
    ledger.claim("uid", lambda: b"report", collection="http://x/collections/c1", fingerprint="f" * 16)
    assert ledger.pending_body("uid") == b"report" and ledger.pending_body("other") is None
    ledger.mark_sent("uid")
    entry = json.loads(path.read_text())["uid"]
    assert (
        entry["sent"] is True and entry["collection"] == "http://x/collections/c1" and entry["fingerprint"] == "f" * 16
    )
    assert before <= entry["reserved_at"] <= entry["sent_at"] <= time.time()
    assert ledger.pending_body("uid") is None  # sent: nothing left to re-send
    # Each write goes to a hidden temporary file beside the ledger (a rename is atomic only within
    # one file system), then replaces it; nothing is left behind.
    assert len(replaced) == 2
    for directory, name, target in replaced:
        assert directory == str(tmp_path) and name.startswith(".ledger.json.") and name.endswith(".tmp")
        assert target == str(path)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_report_that_is_not_base64_is_a_corrupt_ledger(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text('{"uid": {"report": "AA!A", "sent": false}}')
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path).entry("uid")


def test_a_published_collection_needs_an_identity_and_a_matching_fingerprint():
    from participant.client import ClientError, Published

    spec = table_1_spec()
    answer = {"id": "c1", "uid": "u" * 16, "spec": spec.to_dict(), "fingerprint": spec.fingerprint}
    published = Published.from_answer(answer)
    assert (published.collection_id, published.uid, published.spec) == ("c1", "u" * 16, spec)
    cases = [
        (answer | {"uid": "u" * 15}, "the service published no usable collection identity (uid)"),
        (answer | {"uid": 12345678901234567890}, "the service published no usable collection identity (uid)"),
        (answer | {"fingerprint": "0" * 16}, "the published spec does not match its fingerprint; refusing to report"),
        ({k: v for k, v in answer.items() if k != "uid"}, "the service's description of the collection lacks 'uid'"),
    ]
    for data, message in cases:
        with pytest.raises(ClientError) as refused:
            Published.from_answer(data)
        assert str(refused.value) == message
