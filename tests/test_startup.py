"""Every command line answers `--help` (and refuses a bad option) without importing what only a
running command uses: the import list, not a timing, is what is checked (bench/startup.py times
it). scikit-learn alone took about 3 s of CPU on every call."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("sklearn", "scipy", "pandas", "matplotlib", "aiohttp", "asyncpg", "sqlite_utils", "joblib", "tqdm")
COMMANDS = [
    ["sim", "--help"],
    ["sim", "sweep", "--help"],
    ["sim", "compare", "--help"],
    ["sim", "plan", "--help"],
    ["aggregator", "--help"],
    ["aggregator", "serve", "--help"],
    ["aggregator", "status", "--help"],
    ["aggregator", "model", "--help"],
    ["aggregator", "spec", "--help"],
    ["sim", "--dataset", "car", "--eps", "0"],  # refused while parsing
]


def imported(command: list[str]) -> set[str]:
    """The top-level packages ``python -m <command>`` imports (from ``-X importtime``)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", *command], capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 2), result.stderr[-2000:]
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_and_refusals_load_nothing_heavy(command):
    loaded = imported(command)
    assert "numpy" in loaded  # the parse itself did run (the check is not vacuous)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_an_app_importing_the_participant_library_loads_no_network_stack():
    """``import participant`` loads nothing beyond the standard library; the client's names load
    numpy and msgpack, and aiohttp only once a client is made (bench/startup.py times both)."""
    def loaded(statement: str) -> set[str]:
        result = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-2000:]
        return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}

    assert not loaded("import participant") & {"numpy", "msgpack", "aiohttp"}
    names = loaded("from participant import Client, Participant, CollectionSpec")
    assert "numpy" in names and "aiohttp" not in names
    assert "aiohttp" in loaded("from participant import Client; Client('http://127.0.0.1:1', ledger=None)")


def test_an_operators_command_and_its_refusal_load_no_data_frame_library():
    """The operator's commands talk HTTP (aiohttp) and, refused, name the database drivers'
    errors (asyncpg): neither loads a data-frame library (pandas costs 0.4 s of CPU a command)."""
    import os

    command = [sys.executable, "-X", "importtime", "-m", "aggregator", "status", "survey", "--url", "http://127.0.0.1:9"]
    env = {**os.environ, "LDPNB_ADMIN_TOKEN": "startup-test-admin-token-0123456789"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and "cannot reach the service" in result.stderr.splitlines()[-1], result.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "aiohttp" in loaded and not loaded & {"pandas", "sqlite_utils", "sklearn"}, sorted(loaded & set(HEAVY))
