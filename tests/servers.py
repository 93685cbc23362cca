"""Real ``python -m aggregator serve`` processes on loopback, for crash and multi-instance tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from contextlib import closing
from pathlib import Path

from .postgres import spawn

ADMIN = "process-test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
MSGPACK = {"Content-Type": "application/msgpack"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One ``serve`` process (with ``workers`` pre-forked workers) on ``port``."""

    def __init__(
        self, db: str, port: int | None = None, workers: int = 1, *extra: str, admin: str = ADMIN,
        env: dict | None = None,
    ):  # fmt: skip
        self.db, self.port, self.workers, self.extra = str(db), port or free_port(), workers, extra
        self.admin = admin  # the token in its environment
        self.env = env or {}  # more of its environment (a test's failpoint, aggregator.store.base.FAILPOINT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "aggregator", "serve", "--db", self.db, "--port", str(self.port),
            "--workers", str(self.workers), *self.extra,
        ]  # fmt: skip

    def start(self) -> Server:
        self.proc = spawn(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LDPNB_ADMIN_TOKEN": self.admin, **self.env},
            start_new_session=True,  # its workers form a group that kill() ends together
        )  # spawned to die with the test process: a suite killed outright leaves no server behind
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.wait(10)
            raise RuntimeError(f"server did not start: {line}{self.proc.stderr.read()}")
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group (workers included), as a crash would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc:
            self.proc.stdout.close()
            self.proc.stderr.close()


class ShufflerProcess(Server):
    """One ``python -m shuffler serve`` process forwarding to ``aggregator``, with ``token_file``,
    and an operator token of its own beside it (``status`` asks what waits with it)."""

    running: dict[str, ShufflerProcess] = {}  # by store, while they run

    def __init__(self, db, aggregator: str, token_file, *extra: str, port: int | None = None):
        super().__init__(db, port, 1, *extra)
        self.aggregator, self.token_file = aggregator, str(token_file)
        self.operator_file = f"{token_file}.operator.{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "shuffler", "serve", "--aggregator", self.aggregator, "--token-file", self.token_file,
            "--db", self.db, "--port", str(self.port), "--operator-token-file", self.operator_file, *self.extra,
        ]  # fmt: skip

    def start(self) -> ShufflerProcess:
        self.operator = token_file(Path(self.operator_file))
        super().start()
        ShufflerProcess.running[self.db] = self
        return self

    def stop(self) -> None:
        ShufflerProcess.running.pop(self.db, None)
        super().stop()

    def kill(self) -> None:
        ShufflerProcess.running.pop(self.db, None)
        super().kill()

    def status(self) -> dict[str, dict]:
        """What its operator is told (``GET /status``), by collection id."""
        request = urllib.request.Request(f"{self.url}/status", headers={"Authorization": f"Bearer {self.operator}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return {row["id"]: row for row in json.load(answer)["collections"]}


def waiting_at(db) -> int:
    """Reports waiting in the shuffler store ``db``, in all: told to the operator of the shuffler
    running on it (which holds a SQLite file alone), or read from a file no shuffler holds."""
    running = ShufflerProcess.running.get(str(db))
    if running is not None:
        return sum(row["waiting"] for row in running.status().values())
    import sqlite3

    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT count(*) FROM waiting").fetchone()[0]


def token_file(path) -> str:
    """A fresh token in ``path`` (mode 0600): what a shuffler and the aggregator's operator share."""
    import secrets

    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path.read_text().strip()
