"""The device's ledger: one report per collection whatever address, thread or process sends it,
and nothing sent when the ledger cannot be trusted."""

import asyncio
import base64
import fcntl
import hashlib
import json
import multiprocessing
import os
import shutil
import stat
import threading
import time
import zlib
from dataclasses import replace

import numpy as np
import pytest

from participant import CollectionSpec, Feature
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


async def test_no_spelling_of_an_origin_opens_a_second_report(service, tmp_path):  # noqa: F811
    await service.create(table_1_spec(protocol="OUE"))
    ledger = tmp_path / "ledger.json"
    outcomes = []
    for url in variants(service.url):
        async with AsyncClient(url, ledger=ledger) as client:
            try:
                outcomes.append(await client.submit("c1", RECORD))
            except AlreadyReported:
                outcomes.append("refused")
    # Keyed by the origin the app configured (normalised) and the id it asked for: every spelling
    # of 127.0.0.1 is one origin; "localhost" is another, as in a browser, so to the device another
    # service (its uids are looked up among its own entries: see the ledger), and its report a
    # fresh draw from the same budget.
    assert outcomes == ["accepted", "accepted", "refused", "refused"]
    assert await service.n_reports() == 2
    entries = json.loads(ledger.read_text())["entries"]
    assert list(entries) == [f"{service.url} c1", f"{service.url.replace('127.0.0.1', 'localhost')} c1"]
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
        "{}",
        '{"abc": {"report": 5, "sent": false}}',
        '{"abc": {"report": "AAAA", "sent": "no"}}',
        '{"abc": "entry"}',
        '{"version": 2, "salt": "00", "entries": {"k": {"report": "AAAA", "sent": false}}}',  # no fingerprint
        '{"version": 5, "salt": "00", "entries": {}}',
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


ASKED = Asked("http://x", "c1", "u" * 32, "f" * 64, 1.0, "q" * 64)
LIMITS = Limits(max_epsilon=2.0, budget=Budget(total=3.0, per_days=30))


def claim(ledger, asked=ASKED, limits=LIMITS, body=b"report"):
    return ledger.claim(asked, limits, lambda: body, lambda old: b"memo:" + old)


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
    claim(ledger, replace(ASKED, group=3))
    ledger.mark_sent("http://x c1")
    data = json.loads(path.read_text())
    entry = data["entries"]["http://x c1"]
    assert {k: entry[k] for k in ("origin", "collection", "uid", "fingerprint", "question", "group", "epsilon", "sent",
                                  "memo_of")} == {
        "origin": "http://x", "collection": "c1", "uid": "u" * 32, "fingerprint": "f" * 64, "question": "q" * 64,
        "group": 3, "epsilon": 1.0, "sent": True, "memo_of": None,
    }  # fmt: skip
    assert before <= entry["reserved_at"] <= entry["sent_at"] <= time.time()
    # Nothing about the record is kept beyond the randomised report.
    assert "record" not in entry and "salt" not in data
    # Each write goes to a hidden temporary file beside the ledger (a rename is atomic only within
    # one file system), then replaces it; nothing is left behind. The report is written first, to
    # the reports directory (compressed), under the SHA-256 of its field, its entry's key, question
    # and group and the SHA-256 of its bytes, which the entry names.
    reports = tmp_path / "ledger.json.reports"
    body = zlib.decompress((reports / entry["report"]).read_bytes())
    binding = b'["report","http://x c1","' + b"q" * 64 + b'",3.0]' + hashlib.sha256(body).digest()
    assert entry["report"] == hashlib.sha256(binding).hexdigest() and body == b"report"
    assert [(d, t) for d, _, t in replaced] == [(str(reports), str(reports / entry["report"])), (str(tmp_path), str(path)), (str(tmp_path), str(path))]
    for _, name, _ in replaced:
        assert name.startswith(".") and name.endswith(".tmp")
    assert not [p.name for p in [*tmp_path.iterdir(), *reports.iterdir()] if p.name.endswith(".tmp")]


def test_a_ledger_of_the_last_format_keeps_working_and_forgets_its_record_hashes(tmp_path):
    path = tmp_path / "ledger.json"
    old = {"version": 2, "salt": "ab" * 16, "entries": {"http://x c1": {
        "origin": "http://x", "collection": "c1", "uid": "u" * 32, "fingerprint": "f" * 64, "epsilon": 1.0,
        "report": "ZHJhd24=", "sent": True, "record": "9" * 64, "memo_of": None, "reserved_at": time.time(),
        "sent_at": time.time(),
    }}}  # fmt: skip
    path.write_text(json.dumps(old))
    ledger = Ledger(path)
    # Its entry has no question: its fingerprint stands for it, so a clone gets its answer for nothing.
    clone = claim(ledger, replace(ASKED, collection="clone", uid="v" * 32), body=b"fresh")
    assert (clone.body, clone.spent) == (b"memo:drawn", 0.0)
    data = json.loads(path.read_text())
    assert "salt" not in data and all("record" not in e for e in data["entries"].values())


def test_a_report_that_is_not_base64_is_a_corrupt_ledger(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text('{"uid": {"report": "AA!A", "sent": false}}')
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path).entries()


def test_a_first_format_ledger_keeps_its_reports_and_counts_them_at_the_cap(tmp_path):
    path = tmp_path / "ledger.json"
    url = "HTTP://X:80/collections/c1"
    # Exactly what the first format's device wrote (participant/client.py before version 2).
    old = {"u" * 32: {"report": "cmVwb3J0", "sent": True, "reserved_at": 1.7e9, "collection": url, "fingerprint": "f" * 64,
                      "sent_at": 1.7e9 + 1}}  # fmt: skip
    path.write_text(json.dumps(old))
    ledger = Ledger(path)
    assert claim(ledger) == Claim("http://x c1", b"report", True, 0.0)
    # Its spend is unknown: counted as the app's cap (2), whenever it was, so 2 + 1.5 passes 3.
    with pytest.raises(BudgetExceeded, match="this device spent epsilon=2 in the last 30 days"):
        claim(ledger, replace(ASKED, collection="c2", uid="w" * 32, fingerprint="a" * 64, question="b" * 64,
                              epsilon=1.5))  # fmt: skip


def spent_ledger(path) -> Ledger:
    """A ledger that spent its whole budget of 3 on c1, c2 and c3 (each its own question), all sent."""
    ledger = Ledger(path)
    for c in ("c1", "c2", "c3"):
        asked = replace(ASKED, collection=c, uid=c * 16, question=c * 32)
        ledger.mark_sent(ledger.claim(asked, LIMITS, lambda c=c: f"answer {c}".encode(), pytest.fail).key)
    return ledger


def test_a_ledger_repeating_a_key_is_refused_so_that_no_text_says_two_things_at_once(tmp_path):
    """The review's: a second ``entries`` after the first (every report forgotten: the device
    reports again and draws past its budget), or an entry's ``epsilon`` given and taken back.
    JSON parsers keep the last of a repeated key; the device refuses the file, nothing drawn."""
    path = tmp_path / "ledger.json"
    ledger = spent_ledger(path)
    fresh = replace(ASKED, collection="c4", uid="d" * 32, question="d" * 64)
    with pytest.raises(BudgetExceeded):
        claim(ledger, fresh)
    text = path.read_text()
    bent = [text[:-1] + ', "entries": {}}', text.replace('"epsilon": 1.0', '"epsilon": 1.0, "epsilon": 0.0'),
            text.replace('"epsilon": 1.0', '"epsilon": 1.0, "epsil\\u006fn": 0.0')]  # fmt: skip
    for variant in bent:
        assert variant != text and json.loads(variant)  # JSON, read leniently
        path.write_text(variant)
        for asked in (fresh, replace(ASKED, collection="c1", uid="c1" * 16, question="c1" * 32)):
            with pytest.raises(LedgerError, match="repeats a key in one object"):
                Ledger(path).claim(asked, LIMITS, pytest.fail, pytest.fail)
        assert path.read_text() == variant


def test_only_a_ledger_exactly_of_the_first_format_is_read_as_one(tmp_path):
    """The review's: an entry holding only ``sent`` and an empty ``report`` was read as the first
    format, its collection lost, so the device reported again. The first format's device wrote
    each entry with its report, times, collection URL and fingerprint; anything less, more or
    other is refused, as are two entries naming one collection (one would be lost)."""
    path = tmp_path / "ledger.json"
    entry = {"report": "cmVwb3J0", "sent": True, "reserved_at": 1.7e9, "collection": "http://x/collections/c1",
             "fingerprint": "f" * 64, "sent_at": 1.7e9 + 1}  # fmt: skip
    for bent in [{"x" * 32: {"sent": True, "report": ""}}, {"u" * 32: {**entry, "report": ""}},
                 {"u" * 32: {**entry, "x": 1}}, {"u" * 15: entry}, {"u" * 32: entry, "v" * 32: entry}]:  # fmt: skip
        path.write_text(json.dumps(bent))
        with pytest.raises(LedgerError, match=str(path)):
            Ledger(path).claim(ASKED, LIMITS, pytest.fail, pytest.fail)
    path.write_text(json.dumps({"u" * 32: entry, "v" * 32: {**entry, "collection": "http://x/collections/c2"}}))
    assert Ledger(path).claim(ASKED, LIMITS, pytest.fail, pytest.fail) == Claim("http://x c1", b"report", True, 0.0)


def test_a_report_named_by_another_entry_is_refused_so_that_no_question_gets_anothers_answer(tmp_path):
    """The review's: two entries' report names swapped (each file still matching its bytes) would
    hand a new collection asking the first one's question the second one's randomised answer. A
    report's name binds its entry's key, question and group: swapped, or kept by an entry whose
    question changed, it is refused, nothing drawn or sent."""
    path = tmp_path / "ledger.json"
    spent_ledger(path)
    clone = replace(ASKED, collection="c5", uid="e" * 32, question="c1" * 32)
    assert claim(Ledger(tmp_path / "ledger.json"), clone).body == b"memo:answer c1"
    data = json.loads(path.read_text())
    c1, c2 = data["entries"]["http://x c1"], data["entries"]["http://x c2"]
    for bent in [{"http://x c1": {**c1, "report": c2["report"]}, "http://x c2": {**c2, "report": c1["report"]}},
                 {"http://x c1": {**c1, "question": "c2" * 32}, "http://x c2": {**c2, "question": "c1" * 32}}]:  # fmt: skip
        path.write_text(json.dumps({**data, "entries": {**data["entries"], **bent}}))
        # Swapped questions are refused as soon as the ledger is read: the clone copies c1's answer,
        # which now answers another question; swapped names when the report is read.
        with pytest.raises(LedgerError, match="another entry's bytes of, the report of 'http://x c|copies a memo of another question"):
            # c2's question: the memo answers from c2 (the newest answer to c1's is the clone's).
            asked = replace(clone, collection="c6", uid="g" * 32, question="c2" * 32)
            Ledger(path).claim(asked, LIMITS, pytest.fail, lambda old: old)


def test_a_ledger_of_version_3_is_read_and_its_reports_named_anew_by_the_next_write(tmp_path):
    """Version 3 named each report's file by the SHA-256 of its bytes alone. It is read (each file
    given its version 4 name, a second link), moved to version 6 by the next write, and the old
    names go then; a file it lost is refused when it is needed, as before."""
    path = tmp_path / "ledger.json"
    spent_ledger(path)
    reports = tmp_path / "ledger.json.reports"
    current = {f.name for f in reports.iterdir()}
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        old = hashlib.sha256(zlib.decompress((reports / entry["report"]).read_bytes())).hexdigest()
        (reports / entry["report"]).rename(reports / old)
        entry["report"] = old
    older = {f.name for f in reports.iterdir()}
    del data["spent"], data["reported"]  # versions 5 and 6's alone
    path.write_text(json.dumps({**data, "version": 3}))
    lost = tmp_path / "lost.json"
    shutil.copy(path, lost)
    shutil.copytree(reports, tmp_path / "lost.json.reports")
    ledger = Ledger(path)
    assert base64.b64decode(ledger.entries()["http://x c2"]["report"]) == b"answer c2"
    assert json.loads(path.read_text())["version"] == 3 and {f.name for f in reports.iterdir()} == current | older
    clone = claim(ledger, replace(ASKED, collection="c5", uid="e" * 32, question="c2" * 32))
    assert (clone.body, clone.spent) == (b"memo:answer c2", 0.0)
    assert json.loads(path.read_text())["version"] == 6
    names = {f.name for f in reports.iterdir()}
    assert current < names and not names & older and len(names) == len(current) + 1
    # A version 3 ledger that lost a report: read, and refused when that report is needed.
    (tmp_path / "lost.json.reports" / data["entries"]["http://x c3"]["report"]).unlink()
    assert claim(Ledger(lost), replace(ASKED, collection="c6", uid="f" * 32, question="c2" * 32)).spent == 0.0
    with pytest.raises(LedgerError, match="lost, or holds altered"):
        claim(Ledger(lost), replace(ASKED, collection="c7", uid="h" * 32, question="c3" * 32))


def test_the_memo_answers_a_question_once_at_an_origin_and_another_origin_draws_afresh_from_one_budget(tmp_path):
    limits = Limits(max_epsilon=2.0, budget=Budget(total=5.0, per_days=30))
    ledger = Ledger(tmp_path / "ledger.json")
    first = claim(ledger, limits=limits, body=b"drawn")
    # The same question under another id and another fingerprint (a θ that DE never uses, say) at
    # the same origin: the same randomised answer, for nothing. The ledger never sees the record,
    # so the answer cannot depend on whether it changed. (Repacked from its newest copy: the
    # second clone's from the first's.)
    for i, fingerprint in enumerate(["f" * 64, "e" * 64]):
        clone = claim(ledger, replace(ASKED, collection=f"clone{i}", uid=f"{i}" * 32, fingerprint=fingerprint),
                      limits, body=b"other")  # fmt: skip
        assert (clone.body, clone.spent) == (b"memo:" * (i + 1) + b"drawn", 0.0)
    # Another origin (another service, or this one under another name) asking the same question,
    # even under the uid the first published: a new collection there, a fresh draw, counted (a
    # refusal or a re-send would tell the second origin what the device did at the first); and at
    # that origin, its own answer again for nothing.
    assert not ledger.entries()["http://x c1"]["sent"]
    elsewhere = claim(ledger, replace(ASKED, origin="http://y", collection="c9"), limits, body=b"fresh")
    assert (elsewhere.body, elsewhere.spent) == (b"fresh", 1.0)
    again = claim(ledger, replace(ASKED, origin="http://y", collection="c2", uid="w" * 32), limits, body=b"other")
    assert (again.body, again.spent) == (b"memo:fresh", 0.0)
    assert ledger.entries()["http://y c9"]["uid"] == ASKED.uid and not ledger.entries()["http://x c1"]["sent"]
    # Another assigned group is another question: a fresh draw, spending ε.
    grouped = claim(ledger, replace(ASKED, collection="g", uid="g" * 32, group=2), limits, body=b"group")
    assert (grouped.body, grouped.spent) == (b"group", 1.0)
    # A new question at another origin spends from the same device budget: 1 + 1 + 1 + 1 = 4.
    other = claim(ledger, replace(ASKED, origin="http://w", collection="n", uid="n" * 32, question="n" * 64),
                  limits, body=b"n")  # fmt: skip
    assert other.spent == 1.0 and ledger.spent(limits) == 4.0 and first.spent == 1.0
    with pytest.raises(BudgetExceeded, match="this device spent epsilon=4 in the last 30 days"):
        ledger.claim(replace(ASKED, origin="http://v", collection="c4", uid="z" * 32, question="z" * 64, epsilon=2.0),
                     limits, pytest.fail, pytest.fail)  # fmt: skip
    # Once the window has passed, the device may spend again.
    assert ledger.spent(limits, now=time.time() + 31 * 86400) == 0.0


def test_many_devices_asked_one_question_by_two_origins_cannot_be_linked_by_their_answers(tmp_path):
    """Twenty devices of one record, each asked the same SHE question at two origins (two services,
    or one under two names): were the memo to send the first origin's answer to the second, every
    device's two reports would be the same bytes, linked 20 of 20. Each report's nearest report
    at the other origin is its own device's no more often than chance (1 in 20 each)."""
    from participant.reporting import Participant
    from participant.wire import pack_report, rewrap, unpack

    spec = CollectionSpec([Feature("f", [str(i) for i in range(8)])], ["a", "b"], "SHE", 1.0)
    record = {"f": "3", "class": "a"}
    answers = {"http://one.example": [], "http://two.example": []}
    for device in range(20):
        ledger = Ledger(tmp_path / f"device{device}.json")
        participant = Participant(spec)
        for origin, sent in answers.items():
            uid = hashlib.sha256(f"{origin} {device}".encode()).hexdigest()[:32]  # each service's own
            asked = Asked(origin, "c", uid, spec.fingerprint, spec.epsilon, spec.question)
            claimed = ledger.claim(asked, LIMITS, lambda: pack_report(participant.draw(record), spec),
                                   lambda old: rewrap(old, spec))  # fmt: skip
            wire = unpack(claimed.body)
            sent.append((wire["input"], np.frombuffer(wire["value"], dtype="<f8")))
    first, second = answers.values()

    def distance(a, b) -> float:  # reports of two inputs (the device picks one at random) are unlike
        return float(((a[1] - b[1]) ** 2).sum()) if a[0] == b[0] else np.inf

    distances = np.array([[distance(a, b) for b in second] for a in first])
    linked = int(((distances.argmin(axis=1) == np.arange(20)) & np.isfinite(distances.min(axis=1))).sum())
    # Chance links about one device (Poisson(1)): at least 7 happens by chance once in 12,000 runs.
    assert linked < 7, f"{linked} of 20 devices linked across origins"


def test_the_yearly_cap_bounds_what_the_rolling_window_allows_over_a_year(tmp_path):
    """A new question a month at the default budget (8 ε in 30 days): the rolling window alone
    would allow 8 ε a month; the yearly cap (3 × 8 = 24 by default) refuses the fourth month's
    draw, and the spend leaves the ledger only once it has counted toward no window."""
    limits = Limits(max_epsilon=8.0)
    assert limits.budget.yearly == 24.0 and Budget(total=2.0).yearly == 6.0 and Budget(yearly=100.0).yearly == 100.0
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    for month in range(3):
        entry = claim(ledger, replace(ASKED, collection=f"m{month}", uid=f"{month}" * 32, question=f"{month}" * 64,
                                      epsilon=8.0), limits)  # fmt: skip
        ledger.mark_sent(entry.key)
        data = json.loads(path.read_text())
        for value in data["entries"].values():  # every entry a month older
            value["reserved_at"] -= 31 * 86400
            value["sent_at"] = value["reserved_at"]
        path.write_text(json.dumps(data))
        ledger = Ledger(path)
    assert ledger.spent(limits) == 0.0 and ledger.spent(limits, days=365) == 24.0
    with pytest.raises(BudgetExceeded, match="in the last 365 days; another 1 would pass this app's yearly cap of 24"):
        ledger.claim(replace(ASKED, collection="m3", uid="3" * 32, question="3" * 64), limits, pytest.fail, pytest.fail)
    # A year after the first, its 8 ε count no more: the device may draw 8 again.
    later = time.time() + (365 - 3 * 31 + 1) * 86400
    assert ledger.spent(limits, now=later, days=365) == 16.0
    with pytest.raises(ValueError, match="Budget.yearly"):
        Budget(yearly=0.0)

def test_an_acknowledged_shuffled_entry_keeps_neither_its_report_nor_its_sealed_copy(tmp_path):
    """A shuffled report is never sent again and never an answer to repeat: once acknowledged its
    entry keeps what the budget counts and nothing of the report. Until then, a retry has its
    bytes; a direct entry keeps its report for the memo."""
    ledger = Ledger(tmp_path / "ledger.json")
    shuffled = ledger.claim(replace(ASKED, collection="s", uid="s" * 32, question=""), LIMITS,
                            lambda: b"report", pytest.fail, lambda body: b"sealed:" + body)  # fmt: skip
    assert ledger.entries()["http://x s"]["sealed"] and ledger.entries()["http://x s"]["report"]
    ledger.mark_sent(shuffled.key)
    entry = ledger.entries()["http://x s"]
    assert (entry["report"], entry["sealed"], entry["sent"], entry["epsilon"]) == ("", "", True, 1.0)
    assert ledger.spent(LIMITS) == 1.0
    direct = claim(ledger, body=b"drawn")
    ledger.mark_sent(direct.key)
    assert claim(ledger, replace(ASKED, collection="copy", uid="k" * 32)).body == b"memo:drawn"


def test_the_budget_window_is_counted_in_days(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    claim(ledger)
    one_day = Limits(max_epsilon=2.0, budget=Budget(total=3.0, per_days=1))
    now = time.time()
    assert ledger.spent(one_day, now=now + 2 * 3600) == 1.0  # two hours later: within the day
    assert ledger.spent(one_day, now=now + 23 * 3600) == 1.0
    assert ledger.spent(one_day, now=now + 25 * 3600) == 0.0


def test_a_collection_above_the_app_cap_is_refused_before_anything_is_drawn(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    with pytest.raises(BudgetExceeded, match="asks epsilon=2.5; this app accepts at most 2 per collection"):
        ledger.claim(replace(ASKED, epsilon=2.5), LIMITS, pytest.fail, pytest.fail)
    assert not ledger.path.exists() or ledger.entries() == {}


def test_no_lock_is_held_while_drawing_and_a_draw_that_lost_the_race_is_dropped(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")

    def draw():
        # Another process takes the lock while this one draws, and records its own report first.
        fd = os.open(ledger.path.with_name(ledger.path.name + ".lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the draw held the lock
        finally:
            os.close(fd)
        assert claim(ledger, body=b"winner").body == b"winner"
        return b"loser"

    assert ledger.claim(ASKED, LIMITS, draw, pytest.fail) == Claim("http://x c1", b"winner", False, 0.0)
    assert ledger.spent(LIMITS) == 1.0


def test_a_symlinked_ledger_is_one_ledger_with_one_lock(tmp_path):
    real = tmp_path / "real" / "ledger.json"
    real.parent.mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(real)
    claim(Ledger(real), body=b"a")
    assert Ledger(link).path == real
    other = replace(ASKED, collection="c2", uid="w" * 32, question="w" * 64, epsilon=2.0)
    with pytest.raises(BudgetExceeded, match="spent epsilon=1 "):  # 1 + 2 passes 2.5: one budget
        claim(Ledger(link), other, limits=Limits(max_epsilon=2.0, budget=Budget(total=2.5)))
    # One lock file, beside the real one; the link is still a link after the writes.
    names = ["ledger.json", "ledger.json.lock", "ledger.json.reports"]
    assert link.is_symlink() and sorted(p.name for p in real.parent.iterdir()) == names
    assert not list(tmp_path.glob("*.lock"))


@pytest.mark.parametrize("content", [b"{}", b"[]", b"null", b'"ledger"', b"7", b'{"version": 2}', b"\xff\xfe{}",
                                     b'{"version": 4, "entries": {}, "version": 4}',
                                     b'{"version": 2, "entries": {"k": {"report": "AA==", "sent": false, '
                                     b'"fingerprint": "f", "reserved_at": 0, "group": "1"}}}'])  # fmt: skip
def test_a_file_that_is_not_a_ledger_refuses_to_send(tmp_path, content):
    path = tmp_path / "ledger.json"
    path.write_bytes(content)
    with pytest.raises(LedgerError, match=str(path)):
        claim(Ledger(path), body=b"x")
    assert path.read_bytes() == content


def test_an_unreadable_or_unwritable_ledger_is_a_ledger_error(tmp_path, monkeypatch):
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(LedgerError, match="cannot read the ledger"):
        claim(Ledger(tmp_path / "dir.json"))
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(LedgerError, match="cannot open the ledger"):
        claim(Ledger(tmp_path / "file" / "ledger.json"))

    def refused(*args):
        raise PermissionError(13, "Permission denied")

    real_replace = os.replace
    monkeypatch.setattr("participant.ledger.os.replace", refused)
    with pytest.raises(LedgerError, match="cannot write a report beside the ledger .*Permission denied"):
        claim(Ledger(tmp_path / "ledger.json"))

    def refused_for_the_ledger(src, dst):
        if str(dst).endswith("ledger.json"):
            refused()
        real_replace(src, dst)

    monkeypatch.setattr("participant.ledger.os.replace", refused_for_the_ledger)
    with pytest.raises(LedgerError, match="cannot write the ledger .*Permission denied"):
        claim(Ledger(tmp_path / "ledger.json"))
    assert not list(tmp_path.glob("**/.*.tmp"))


@pytest.mark.parametrize("url, origin", [
    ("HTTP://Example.ORG:80//api//", "http://example.org/api"),
    ("https://example.org:443/", "https://example.org"),
    ("https://example.org:8443", "https://example.org:8443"),
    ("http://[::1]:8080/", "http://[::1]:8080"),
    ("http://127.1:8080", "http://127.0.0.1:8080"),
    ("http://2130706433:8080", "http://127.0.0.1:8080"),
    ("http://0x7f.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://0177.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://127.0.0.1.:8080", "http://127.0.0.1:8080"),
    ("http://[::ffff:127.0.0.1]:8080", "http://127.0.0.1:8080"),
    ("http://[0:0:0:0:0:0:0:1]", "http://[::1]"),
    ("http://localhost.:8080/", "http://localhost:8080"),
    ("http://%6C%6Fcalhost", "http://localhost"),
    ("http://user:secret@example.org", "http://example.org"),
    ("http://BÜCHER.example", "http://xn--bcher-kva.example"),
    # UTS #46 nontransitional, as browsers: faß and fass are two hosts, σοφος (final sigma) and ΣΟΦΟΣ two.
    ("http://faß.example", "http://xn--fa-hia.example"),
    ("http://ΣΟΦΟΣ.example", "http://xn--0xaakcn.example"),
    ("http://σοφος.example", "http://xn--0xaajbq.example"),
    ("http://example.org/x/../api/./", "http://example.org/api"),
    ("http://example.org/%2e%2E/api/%2E", "http://example.org/api"),
    ("http://example.org/%7euser/%2f", "http://example.org/~user/%2F"),
])  # fmt: skip
def test_origins_are_normalised_as_a_browser_would(url, origin):
    assert normalise_origin(url) == origin


@pytest.mark.parametrize("url", ["example.org", "ftp://example.org", "http://", "http://x/?a=1", "http://x/#f",
                                 "http://x:99999", "http://a b", "http://x\u200d.example"])  # fmt: skip
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
