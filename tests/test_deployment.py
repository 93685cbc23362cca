"""docs/guides/deployment.md's backups, as written, on real services: the aggregator's SQLite file
copied while it serves (the copy serves again, holding its collections), the shuffler's refused
while it runs ("database is locked") and copied once it is stopped by SIGTERM (what waited is in
the copy)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from .servers import AUTH, Server, ShufflerProcess, token_file
from .test_shuffler import RECORD, create, submit_all

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "guides" / "deployment.md").read_text()


def backup_line(store: str, copy: Path) -> list[str]:
    """The guide's ``sqlite3 … .backup …`` line for the file of ``store`` (``ldpnb`` or
    ``shuffler``), as a command copying ``store``'s file to ``copy``."""
    (line,) = [m for m in re.findall(r'sqlite3 (\S+) "\.backup ([^"]+)"', PAGE) if m[0].endswith(f"/{store}.sqlite3")]
    return ["sqlite3", line[0], f".backup {copy}"]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 shell the guide uses is not installed")
def test_the_guides_sqlite_backups_copy_the_aggregator_while_it_serves_and_the_shuffler_once_stopped(tmp_path):
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "ldpnb.sqlite3").start()
    shuffler = ShufflerProcess(tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3")
    shuffler.start()
    try:
        create(server, "survey", shuffler.url, token, min_batch=10)
        assert asyncio.run(submit_all(server.url, "survey", [RECORD] * 3, tmp_path, shuffler.url)) == ["accepted"] * 3
        command = backup_line("ldpnb", tmp_path / "aggregator-copy.sqlite3")
        command[1] = str(tmp_path / "ldpnb.sqlite3")
        assert subprocess.run(command, capture_output=True, text=True, timeout=60).returncode == 0
        command = backup_line("shuffler", tmp_path / "shuffler-copy.sqlite3")
        command[1] = str(tmp_path / "shuffler.sqlite3")
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "database is locked" in refused.stderr and "database is locked" in PAGE
        shuffler.proc.send_signal(signal.SIGTERM)  # systemctl stop
        shuffler.proc.wait(15)
        assert subprocess.run(command, capture_output=True, text=True, timeout=60).returncode == 0
    finally:
        shuffler.stop()
        server.stop()
    status = [sys.executable, "-m", "shuffler", "status", "--db", str(tmp_path / "shuffler-copy.sqlite3")]
    told = subprocess.run(status, capture_output=True, text=True, timeout=60)
    assert "survey: 3 waiting for a batch of 10" in told.stdout, told.stderr
    restored = Server(tmp_path / "aggregator-copy.sqlite3").start()
    try:
        request = urllib.request.Request(f"{restored.url}/collections/survey/status", headers=AUTH)
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.load(answer)["collection"] == "survey"  # the copy serves, its admin token and all
    finally:
        restored.stop()
