"""The ledger against an aggregator that bends it (issue 79's review): a collection whose entry left
the ledger is refused for a year (its marker), one origin's collections never refuse another's, and
a service that never acknowledges holds at most ``max_collections`` entries. The device's clock is
advanced as the review's scripts advance it; ``participant-js/test/markers.test.ts`` holds the same
cases for the JavaScript device."""

import json
import types
import time
from dataclasses import replace

import pytest

import participant.ledger as ledger_module
from participant.errors import AlreadyReported, LedgerError, LimitExceeded
from participant.ledger import Asked, Budget, Ledger, Limits
from participant.ledger_format import marker, reported_problem

DAY = 86_400.0
ASKED = Asked("http://x.example", "X", "x" * 32, "f" * 64, 0.05, "x" * 64)


@pytest.fixture
def clock(monkeypatch):
    """The device's clock (seconds since the epoch), a list so that a test can move it."""
    now = [1_700_000_000.0]
    monkeypatch.setattr(ledger_module, "time", types.SimpleNamespace(time=lambda: now[0]))
    return now


def asked(name: str, origin: str = "http://x.example", **changes) -> Asked:
    return replace(ASKED, origin=origin, collection=name, uid=name.ljust(32, "u"), question=name.ljust(64, "q"), **changes)


def report(ledger: Ledger, question: Asked, limits: Limits = Limits(), shuffled: bool = False) -> None:
    """Claim ``question`` and have it acknowledged."""
    seal = (lambda body: b"sealed:" + body) if shuffled else None
    ledger.mark_sent(ledger.claim(question, limits, lambda: b"drawn", lambda old: old, seal).key)


def test_a_direct_collection_whose_entry_left_is_refused_by_id_and_by_uid(tmp_path, clock):
    """X, then max_memo_per_origin newer questions (X's answer leaves the memo), then 33 days: X's
    entry leaves at the next write; asked again (its id, or its uid under another id), it is refused."""
    path = tmp_path / "ledger.json"
    ledger, limits = Ledger(path), Limits(max_memo_per_origin=2)
    report(ledger, ASKED, limits)
    clock[0] += DAY
    for i in range(2):
        report(ledger, asked(f"Q{i}"), limits)
    clock[0] += 32 * DAY
    report(ledger, asked("Z"), limits)  # any write lets the old entries leave
    data = json.loads(path.read_text())
    assert "http://x.example X" not in data["entries"] and data["version"] == 6
    with pytest.raises(AlreadyReported, match="already reported to collection 'X'"):
        ledger.claim(ASKED, limits, pytest.fail, pytest.fail)
    with pytest.raises(AlreadyReported):
        ledger.claim(replace(ASKED, collection="X-again"), limits, pytest.fail, pytest.fail)
    # Another origin's X is another collection: a fresh draw there.
    assert ledger.claim(replace(ASKED, origin="http://y.example"), limits, lambda: b"y", pytest.fail).spent == 0.05


def test_a_shuffled_collection_is_refused_32_days_later_and_answered_afresh_after_a_year(tmp_path, clock):
    ledger = Ledger(tmp_path / "ledger.json")
    shuffled = replace(asked("S", epsilon=2.0), question="")
    report(ledger, shuffled, shuffled=True)
    clock[0] += 32 * DAY
    report(ledger, replace(asked("T"), question=""), shuffled=True)
    with pytest.raises(AlreadyReported):
        ledger.claim(shuffled, Limits(), pytest.fail, pytest.fail, lambda body: body)
    # Past a year its marker leaves too (the yearly cap bounds the spend from then on).
    clock[0] += (365 - 32 + 2) * DAY
    report(ledger, replace(asked("U"), question=""), shuffled=True)
    assert ledger.claim(shuffled, Limits(), lambda: b"again", pytest.fail, lambda body: body).spent == 2.0


def test_a_memoised_copy_whose_entry_left_is_not_answered_again(tmp_path, clock):
    """One question under X1, X2, X3 (a draw, then two memo copies): on day 32 the copies X1 and
    X2 have left (the memo keeps X3's); X2, asked again, is refused, not answered from the memo."""
    ledger = Ledger(tmp_path / "ledger.json")
    for name in ("X1", "X2", "X3"):
        report(ledger, replace(ASKED, collection=name, uid=name.ljust(32, "u")))
        clock[0] += 1
    clock[0] += 32 * DAY
    report(ledger, asked("Z"))
    assert set(ledger.entries()) == {"http://x.example X3", "http://x.example Z"}
    with pytest.raises(AlreadyReported):
        ledger.claim(replace(ASKED, collection="X2", uid="X2".ljust(32, "u")), Limits(), pytest.fail, pytest.fail)


def test_one_origin_at_its_cap_never_refuses_another(tmp_path, clock):
    """Service A asks one question under max_collections ids (one draw, memo copies): A is refused
    the next, B at another origin is not (no refusal channel between services)."""
    ledger, limits = Ledger(tmp_path / "ledger.json"), Limits(max_collections=5)
    for i in range(5):
        report(ledger, replace(ASKED, collection=f"A{i}", uid=f"A{i}".ljust(32, "u")), limits)
    with pytest.raises(LimitExceeded, match=r"holds 5 collections at http://x.example .*\(Limits.max_collections\)"):
        ledger.claim(replace(ASKED, collection="A5", uid="A5".ljust(32, "u")), limits, pytest.fail, pytest.fail)
    assert ledger.claim(asked("B0", "http://b.example"), limits, lambda: b"b", pytest.fail).spent == 0.05


def test_a_service_that_never_acknowledges_holds_at_most_max_collections_entries(tmp_path, clock):
    """Nothing acknowledged: the pending entries stay (a retry re-sends them), and count toward the
    origin's cap whatever their age, so months of new ids leave at most max_collections entries."""
    path = tmp_path / "ledger.json"
    ledger, limits = Ledger(path), Limits(max_collections=6, budget=Budget(total=8.0, per_days=30))
    refused = 0
    for month in range(4):
        for i in range(4):
            try:
                ledger.claim(replace(ASKED, collection=f"m{month}-{i}", uid=f"m{month}-{i}".ljust(32, "u")), limits,
                             lambda: b"x", lambda old: old)  # fmt: skip
            except LimitExceeded as exc:
                assert "Limits.max_collections" in str(exc)
                refused += 1
        clock[0] += 31 * DAY
    assert len(json.loads(path.read_text())["entries"]) == 6 and refused == 10
    # Another origin is not refused.
    ledger.claim(asked("other", "http://b.example"), limits, lambda: b"b", pytest.fail)


def test_the_memo_bound_is_per_origin_only(tmp_path, clock):
    """One origin's questions never give up another's answers (no bound over all origins)."""
    ledger, limits = Ledger(tmp_path / "ledger.json"), Limits(max_collections=3, max_memo_per_origin=3)
    report(ledger, asked("kept", "http://b.example"), limits)
    for i in range(3):
        report(ledger, asked(f"a{i}"), limits)
    copy = ledger.claim(replace(asked("again", "http://b.example"), question="kept".ljust(64, "q")), limits, pytest.fail,
                        lambda old: b"memo:" + old)  # fmt: skip
    assert (copy.body, copy.spent) == (b"memo:drawn", 0.0)


def version_6(reported) -> str:
    return json.dumps({"version": 6, "entries": {}, "spent": {}, "reported": reported})


MARK = marker("collection", "http://x.example", "X")


@pytest.mark.parametrize(
    "reported, problem",
    [
        ([], "not a mapping"),
        ({"01": MARK}, "a day that is none"),
        ({str(int(time.time()) // 86_400 + 2): MARK}, "a day that is none"),  # after the clock's
        ({"7": ""}, "not markers"),
        ({"7": MARK[:-1]}, "not markers"),
        ({"7": MARK + "0"}, "not markers"),
        ({"7": MARK.upper()}, "not markers"),
        ({"7": 5}, "not markers"),
        ({"7": MARK + MARK}, "repeat a marker"),
        ({"7": MARK, "8": MARK}, "repeat a marker"),
    ],
)
def test_markers_of_any_shape_the_device_does_not_write_are_refused(tmp_path, reported, problem):
    assert problem in reported_problem(reported)
    path = tmp_path / "ledger.json"
    path.write_text(version_6(reported))
    with pytest.raises(LedgerError, match=problem):
        Ledger(path).claim(ASKED, Limits(), pytest.fail, pytest.fail)


def test_a_version_5_ledger_is_read_as_before_and_written_as_version_6(tmp_path, clock):
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"version": 5, "entries": {}, "spent": {"7": "1/2"}}))
    for bent in ({"version": 5, "entries": {}, "spent": {}, "reported": {}}, {"version": 6, "entries": {}, "spent": {}}):
        (tmp_path / "bent.json").write_text(json.dumps(bent))
        with pytest.raises(LedgerError, match="not a mapping of version"):
            Ledger(tmp_path / "bent.json").claim(ASKED, Limits(), pytest.fail, pytest.fail)
    Ledger(path).claim(ASKED, Limits(), lambda: b"x", pytest.fail)
    assert json.loads(path.read_text())["version"] == 6 and json.loads(path.read_text())["reported"] == {}
    # A marker a device wrote, held well-formed, refuses its collection.
    path.write_text(version_6({str(int(clock[0] // DAY) - 40): marker("uid", "http://x.example", ASKED.uid)}))
    with pytest.raises(AlreadyReported):
        Ledger(path).claim(ASKED, Limits(), pytest.fail, pytest.fail)


def test_a_clock_set_back_is_refused_by_a_ledger_that_read_the_file_before(tmp_path, clock):
    """The review's clock attack: A drawn, the clock set back 20 days, B drawn there, the clock
    corrected, C drawn: 1.5 of a 1.0 total within ten real days, because the object that had read
    the file before took its bytes as checked. It checks them against the clock again."""
    limits = Limits(budget=Budget(total=1.0))
    ledger = Ledger(tmp_path / "ledger.json")
    report(ledger, asked("A", epsilon=0.5), limits)
    clock[0] -= 20 * DAY
    for reader in (ledger, Ledger(tmp_path / "ledger.json")):  # the same object, and a device just started
        with pytest.raises(LedgerError, match="past this device's clock"):
            reader.claim(asked("B", epsilon=0.5), limits, pytest.fail, pytest.fail)
    clock[0] += 20 * DAY
    report(ledger, asked("B", epsilon=0.5), limits)  # the clock right again: the ledger is read


def test_a_report_acknowledged_late_keeps_its_collection_refused_a_year_from_then(tmp_path, clock):
    """A report drawn, re-sent unacknowledged for 364.5 days, then acknowledged: its entry leaves at
    the next write, and its markers are dated by the acknowledgement, not the draw, so that the
    collection is refused a year after the service last heard it (dated by the draw, it was drawn
    again two days later)."""
    ledger = Ledger(tmp_path / "ledger.json")
    key = ledger.claim(ASKED, Limits(), lambda: b"drawn", pytest.fail).key
    clock[0] += 364.5 * DAY
    ledger.mark_sent(key)
    clock[0] += 2 * DAY
    report(ledger, asked("Z"))  # any write lets the old entry leave
    assert "http://x.example X" not in json.loads((tmp_path / "ledger.json").read_text())["entries"]
    with pytest.raises(AlreadyReported):
        ledger.claim(ASKED, Limits(), pytest.fail, pytest.fail)
