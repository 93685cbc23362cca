"""A real PostgreSQL for the suite, from the pgserver wheel's binaries, that dies with the run.

pgserver's own start goes through ``pg_ctl``, which detaches the server: a suite stopped by a
signal left it running. Here the postmaster is this process's child, asked by the kernel to die
with the thread that started it (``PR_SET_PDEATHSIG``, set after the switch to the unprivileged
user, which would clear it); its backends end when they see it gone. ``stop`` and ``start`` also
give the fault tests PostgreSQL's fast and immediate shutdowns, as ``pg_ctl -m`` sends them.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import asyncpg
from pgserver._commands import POSTGRES_BIN_PATH, initdb
from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

PR_SET_PDEATHSIG = 1
SHUTDOWN = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


def die_with_parent() -> None:
    """For ``preexec_fn``: the kernel SIGKILLs the child when the thread that started it ends."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# The parent-death signal fires when the *thread* that forked the child ends, so every server is
# started from this one thread, which lives as long as the test process.
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="ldpnb-test-spawner")


def spawn(command: list[str], **options) -> subprocess.Popen:
    """``subprocess.Popen(command, **options)`` from the spawner thread, dying with this process."""
    return _SPAWNER.submit(subprocess.Popen, command, preexec_fn=die_with_parent, **options).result()


def _run(make_coroutine):
    """``asyncio.run(make_coroutine())`` on a thread of its own: callers may be inside a running loop."""
    outcome = {}

    def target():
        try:
            outcome["value"] = asyncio.run(make_coroutine())
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@contextmanager
def server_directory(name: str) -> Iterator[Path]:
    """A new folder for a server's files, removed afterwards. Not under pytest's temporary root:
    the server runs as another user, so every folder above its data is opened to others for
    traversal, and any other pytest session of this user on the machine sets that root
    (``/tmp/pytest-of-<user>``) back to its owner alone, which stopped a running suite's server
    from reaching its data ("Permission denied")."""
    path = Path(tempfile.mkdtemp(prefix=f"ldpnb-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class PostgreSQL:
    """One server in ``directory`` (data and Unix socket there; no TCP port; from
    :func:`server_directory`)."""

    def __init__(self, directory: Path, **settings: object):
        self.directory = Path(directory)
        self.data = self.directory / "data"
        self.settings = {"max_connections": 100, "fsync": "on", **settings}
        self.user = "pgserver" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
        self.process: subprocess.Popen | None = None
        self.data.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            ensure_user_exists(self.user)
            ensure_prefix_permissions(self.data)
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
            entry = pwd.getpwnam(self.user)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        initdb(["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"], pgdata=self.data, user=self.user)

    @property
    def socket_dir(self) -> str:
        return str(self.directory)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def start(self, timeout: float = 30.0) -> PostgreSQL:
        options = [f"--{k}={v}" for k, v in self.settings.items()]
        command = [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.data), "-k", self.socket_dir, "-h", "", *options]
        log = open(self.directory / "postgres.log", "a")  # noqa: SIM115 (the server's for its whole life)
        self.process = spawn(command, stdout=log, stderr=log, user=self.user, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {(self.directory / 'postgres.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def ready(self) -> bool:
        async def probe():
            conn = await asyncpg.connect(self.url(), timeout=2)
            await conn.close()

        try:
            _run(probe)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        return True

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """Shut down as ``pg_ctl stop -m mode`` does (``immediate`` is a crash: recovery at the next start)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(SHUTDOWN[mode])
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""

        async def create():
            conn = await asyncpg.connect(self.url(), timeout=10)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()

        _run(create)
        return self.url(name)
