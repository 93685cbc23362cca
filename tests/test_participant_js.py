"""The JavaScript participant (participant-js/) against the Python one and against the real service.

The package is installed from its lock file (``npm ci``) and compiled (``tsc``) once; its own tests
(``node --test``) then check the known answers this suite generates from the Python participant
(tests/js_vectors.py) and the χ² of its mechanisms' draws, and a report it builds from a published
spec is stored by a real ``python -m aggregator serve``.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import pytest

from participant import CollectionSpec, Feature

from .js_vectors import vectors
from .servers import AUTH, Server

ROOT = os.path.join(os.path.dirname(__file__), "..", "participant-js")


def npm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["npm", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built():
    """participant-js installed from its lock file and compiled; its directory."""
    if not os.path.isdir(os.path.join(ROOT, "node_modules")):
        installed = npm("ci", "--no-audit", "--no-fund")
        assert installed.returncode == 0, installed.stderr[-3000:]
    compiled = subprocess.run(["npx", "tsc", "-p", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stdout[-3000:]
    return ROOT


def test_the_javascript_participant_reproduces_the_python_one(built, tmp_path):
    """Float repr, canonical JSON, fingerprints, thresholds, auto, and 320 reports byte for byte
    from the same words; the mechanisms' own draws against their exact distributions."""
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(vectors()))
    result = subprocess.run(
        ["node", "--test", "dist/test/"], cwd=built, capture_output=True, text=True, timeout=300,
        env={**os.environ, "LDPNB_VECTORS": str(path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:]
    assert "# fail 0" in result.stdout and "# pass 13" in result.stdout, result.stdout[-2000:]


@pytest.fixture
def service(tmp_path):
    server = Server(tmp_path / "js.sqlite3").start()
    yield server
    server.stop()


def create(server, spec: CollectionSpec, cid: str) -> None:
    body = json.dumps({"spec": spec.to_dict(), "min_reports": 1, "id": cid}).encode()
    request = urllib.request.Request(
        f"{server.url}/collections", data=body, headers={**AUTH, "Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status in (200, 201)


def reports_stored(server, cid: str) -> int:
    request = urllib.request.Request(f"{server.url}/collections/{cid}/status", headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["reports"]


@pytest.mark.parametrize("protocol", ["DE", "OUE", "SUE", "auto"])
def test_a_report_built_in_javascript_is_stored_by_the_service(built, service, protocol):
    spec = CollectionSpec(
        [Feature("colour", ["red", "blue", "green"]), Feature("size", [str(i) for i in range(30)])],
        ["yes", "no"], protocol, 1.0,
    )  # fmt: skip
    create(service, spec, f"js-{protocol.lower()}")
    record = json.dumps({"colour": "blue", "size": "7", "class": "no"})
    for sent in range(1, 4):
        result = subprocess.run(
            ["node", "dist/test-support/post_once.js", service.url, f"js-{protocol.lower()}", record],
            cwd=built, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        answer = json.loads(result.stdout)
        assert answer["status"] in (200, 201) and answer["answer"]["status"] == "accepted", answer
        assert reports_stored(service, f"js-{protocol.lower()}") == sent
