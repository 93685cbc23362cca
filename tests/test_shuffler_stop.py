"""A shuffler stopped by SIGTERM while reports stream in and batches are released: a real shuffler
process and a real aggregator on loopback. It exits 0 with one line saying so and leaves its
SQLite store closed (no log beside it); restarted, every report is counted exactly once at the
aggregator, those acknowledged before the stop and those a device re-sends because it heard
nothing."""

from __future__ import annotations

import os
import signal
import threading
import urllib.error
import urllib.request

from participant.view import ShuffledView

from .servers import Server, ShufflerProcess, free_port, token_file
from .test_shuffled_guarantee import sealed_under
from .test_shuffler import call, counted, create, wait_for

FAST = ("--interval", "0.2", "--min-batch", "2", "--dummies", "0", "--per-address", "0")


def sent(shuffler: str, sealed: bytes) -> bool:
    """Whether the shuffler acknowledged ``sealed`` (accepted, or a duplicate of one it holds)."""
    request = urllib.request.Request(f"{shuffler}/collections/c/reports", data=sealed, method="POST",
                                     headers={"Content-Type": "application/ldpnb-sealed"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status in (200, 201)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_sigterm_mid_stream_exits_0_and_loses_nothing_acknowledged(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    db, port = tmp_path / "s.sqlite3", free_port()
    shuffler = ShufflerProcess(db, server.url, tmp_path / "token.txt", *FAST, port=port).start()
    try:
        create(server, "c", shuffler.url, token, min_batch=2)
        view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/c/view"))
        reports = [sealed_under(view) for _ in range(400)]
        acknowledged = [False] * len(reports)
        enough, stopping = threading.Event(), threading.Event()

        def stream(lane: int) -> None:
            for i in range(lane, len(reports), 4):
                if enough.is_set():  # the rest held until the signal is sent: the stop is mid-stream
                    stopping.wait(120)
                acknowledged[i] = sent(shuffler.url, reports[i])
                if sum(acknowledged) >= 40:
                    enough.set()

        lanes = [threading.Thread(target=stream, args=(lane,), daemon=True) for lane in range(4)]
        for lane in lanes:
            lane.start()
        assert enough.wait(60), "the shuffler acknowledged too few reports"
        wait_for(lambda: counted(server, "c") > 0)  # batches are being released and forwarded
        shuffler.proc.send_signal(signal.SIGTERM)
        stopping.set()  # the lanes go on, into the stopping shuffler
        assert shuffler.proc.wait(30) == 0
        for lane in lanes:
            lane.join(60)
        stderr = shuffler.proc.stderr.read()
        assert [line for line in stderr.splitlines() if "stopped on SIGTERM" in line] != [], stderr
        assert "Traceback" not in stderr, stderr
        assert not os.path.exists(f"{db}-wal")  # scrubbed and closed
        assert 0 < sum(acknowledged) < len(reports)  # stopped mid-stream
        shuffler.stop()

        shuffler = ShufflerProcess(db, server.url, tmp_path / "token.txt", *FAST, port=port).start()
        # Each device that heard nothing sends its report again; the others are done.
        for i, sealed in enumerate(reports):
            if not acknowledged[i]:
                assert sent(shuffler.url, sealed)
        wait_for(lambda: counted(server, "c") == len(reports))
        wait_for(lambda: all(row["waiting"] == 0 and row["in_flight"] == 0 for row in shuffler.status().values()))
        assert counted(server, "c") == len(reports)
    finally:
        shuffler.stop()
        server.stop()
