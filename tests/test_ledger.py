"""The device's ledger: one report per collection whatever address, thread or process sends it,
and nothing sent when the ledger cannot be trusted."""

import asyncio
import hashlib
import hmac
import json
import multiprocessing
import os
import stat
import threading
import time
from dataclasses import replace

import pytest

from participant.client import AlreadyReported, AsyncClient, Client
from participant.errors import BudgetExceeded, CollectionChanged, LedgerError
from participant.ledger import Asked, Budget, Claim, Ledger, Limits, normalise_origin

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
    # Keyed by the origin the app configured (normalised) and the id it asked for; "localhost" is
    # another origin, refused because the service it reaches published a uid already reported to.
    entries = json.loads(ledger.read_text())["entries"]
    assert list(entries) == [f"{service.url} c1"]
    assert entries[f"{service.url} c1"]["uid"] == (await service.collection()).uid
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
        '{"version": 2, "salt": "00", "entries": {"k": {"report": "AAAA", "sent": false}}}',  # no fingerprint
        '{"version": 3, "salt": "00", "entries": {}}',
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


ASKED = Asked("http://x", "c1", "u" * 32, "f" * 64, 1.0)
LIMITS = Limits(max_epsilon=2.0, budget=Budget(total=3.0, per_days=30))


def claim(ledger, asked=ASKED, record=b"record", limits=LIMITS, body=b"report"):
    return ledger.claim(asked, limits, record, lambda: body, lambda old: b"memo:" + old)


def test_claim_returns_the_first_report_to_everyone(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    assert claim(ledger, body=b"first") == Claim("http://x c1", b"first", False, 1.0)
    assert claim(ledger, body=b"second") == Claim("http://x c1", b"first", False, 0.0)
    ledger.mark_sent("http://x c1")
    assert claim(ledger, body=b"second") == Claim("http://x c1", b"first", True, 0.0)
    # Another published uid changes nothing; another spec is refused, drawing nothing.
    assert claim(ledger, replace(ASKED, uid="v" * 32), body=b"x").body == b"first"
    with pytest.raises(CollectionChanged, match="under another spec"):
        claim(ledger, replace(ASKED, fingerprint="e" * 64), body=b"x")


def test_the_ledger_records_when_and_what_and_replaces_its_file_atomically(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    replaced = []
    real_replace = os.replace

    def replace_file(src, dst):
        replaced.append((os.path.dirname(src), os.path.basename(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr("participant.ledger.os.replace", replace_file)
    before = time.time()
    claim(ledger, record=b"Young;Low;Male")
    ledger.mark_sent("http://x c1")
    data = json.loads(path.read_text())
    entry = data["entries"]["http://x c1"]
    assert {k: entry[k] for k in ("origin", "collection", "uid", "fingerprint", "epsilon", "sent", "memo_of")} == {
        "origin": "http://x", "collection": "c1", "uid": "u" * 32, "fingerprint": "f" * 64, "epsilon": 1.0,
        "sent": True, "memo_of": None,
    }  # fmt: skip
    assert before <= entry["reserved_at"] <= entry["sent_at"] <= time.time()
    # The record is kept only as a hash keyed by the ledger's own salt.
    assert entry["record"] == hmac.new(bytes.fromhex(data["salt"]), b"Young;Low;Male", hashlib.sha256).hexdigest()
    assert b"Young" not in path.read_bytes()
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
        Ledger(path).entries()


def test_a_first_format_ledger_keeps_its_reports_and_counts_them_at_the_cap(tmp_path):
    path = tmp_path / "ledger.json"
    url = "HTTP://X:80/collections/c1"
    old = {"u" * 32: {"report": "cmVwb3J0", "sent": True, "collection": url, "fingerprint": "f" * 64}}
    path.write_text(json.dumps(old))
    ledger = Ledger(path)
    assert claim(ledger) == Claim("http://x c1", b"report", True, 0.0)
    # Its spend is unknown: counted as the app's cap (2), whenever it was, so 2 + 1.5 passes 3.
    with pytest.raises(BudgetExceeded, match="spent epsilon=2 at http://x"):
        claim(ledger, replace(ASKED, collection="c2", uid="w" * 32, fingerprint="a" * 64, epsilon=1.5))


def test_memoised_reports_cost_nothing_and_changed_records_cost_again(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    first = claim(ledger, body=b"drawn")
    clone = claim(ledger, replace(ASKED, collection="clone", uid="v" * 32), body=b"other")
    assert (clone.body, clone.spent) == (b"memo:drawn", 0.0)  # the same randomised answer, no new spend
    other_origin = claim(ledger, replace(ASKED, origin="http://y", collection="clone", uid="x" * 32), body=b"y")
    assert (other_origin.body, other_origin.spent) == (b"y", 1.0)  # memoised per origin only
    changed = claim(ledger, replace(ASKED, collection="c3", uid="y" * 32), record=b"changed", body=b"fresh")
    assert (changed.body, changed.spent) == (b"fresh", 1.0)
    assert ledger.spent("http://x", LIMITS) == 2.0 and first.spent == 1.0
    # A fresh draw of 1.5 at this origin would pass the total of 3 within 30 days: refused, nothing drawn.
    with pytest.raises(BudgetExceeded, match="spent epsilon=2 at http://x in the last 30 days"):
        ledger.claim(replace(ASKED, collection="c4", uid="z" * 32, fingerprint="b" * 64, epsilon=1.5), LIMITS, b"r", pytest.fail, pytest.fail)
    # Once the window has passed, the origin may spend again.
    monkey_now = time.time() + 31 * 86400
    assert ledger.spent("http://x", LIMITS, now=monkey_now) == 0.0


def test_a_collection_above_the_app_cap_is_refused_before_anything_is_drawn(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    with pytest.raises(BudgetExceeded, match="asks epsilon=2.5; this app accepts at most 2 per collection"):
        ledger.claim(replace(ASKED, epsilon=2.5), LIMITS, b"r", pytest.fail, pytest.fail)
    assert not ledger.path.exists() or ledger.entries() == {}


@pytest.mark.parametrize("url, origin", [
    ("HTTP://Example.ORG:80//api//", "http://example.org/api"),
    ("https://example.org:443/", "https://example.org"),
    ("https://example.org:8443", "https://example.org:8443"),
    ("http://[::1]:8080/", "http://[::1]:8080"),
])  # fmt: skip
def test_origins_are_normalised(url, origin):
    assert normalise_origin(url) == origin


@pytest.mark.parametrize("url", ["example.org", "ftp://example.org", "http://"])
def test_an_address_without_scheme_or_host_is_refused(url):
    with pytest.raises(ValueError, match="http"):
        normalise_origin(url)


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
