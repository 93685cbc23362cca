"""Real ``python -m aggregator serve`` processes on loopback, for crash and multi-instance tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

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

    def __init__(self, db: str, port: int | None = None, workers: int = 1, *extra: str, admin: str = ADMIN):
        self.db, self.port, self.workers, self.extra = str(db), port or free_port(), workers, extra
        self.admin = admin  # the token in its environment
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
            env={**os.environ, "LDPNB_ADMIN_TOKEN": self.admin},
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
    """One ``python -m shuffler serve`` process forwarding to ``aggregator``, with ``token_file``."""

    def __init__(self, db, aggregator: str, token_file, *extra: str, port: int | None = None):
        super().__init__(db, port, 1, *extra)
        self.aggregator, self.token_file = aggregator, str(token_file)

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "shuffler", "serve", "--aggregator", self.aggregator, "--token-file", self.token_file,
            "--db", self.db, "--port", str(self.port), *self.extra,
        ]  # fmt: skip


def token_file(path) -> str:
    """A fresh token in ``path`` (mode 0600): what a shuffler and the aggregator's operator share."""
    import secrets

    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path.read_text().strip()
