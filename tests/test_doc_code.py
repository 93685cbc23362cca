"""The README's and the guides' Python runs as written: every ``python`` block, in order, one file's
blocks as one script, in a fresh process (with the model file the README loads provided). A block
that needs a running service at an address of its own says so in the comment before it, and is
the only kind left out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
NOT_RUN = "<!-- not run: it needs a service at that address -->"


def blocks(path: Path) -> tuple[list[str], int]:
    """The file's Python blocks to run, and how many it leaves out (each said so before it)."""
    text, run, skipped = path.read_text(), [], 0
    for match in re.finditer(r"```python\n(.*?)^```$", text, re.M | re.S):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if before == NOT_RUN:
            skipped += 1
        else:
            run.append(match.group(1))
    return run, skipped


def test_every_python_block_left_out_needs_a_service_and_some_are_run():
    counted = {path.name: blocks(path) for path in DOCUMENTS}
    assert sum(len(run) for run, _ in counted.values()) >= 3, counted
    for path in DOCUMENTS:
        for skipped in re.finditer(re.escape(NOT_RUN) + r"\n```python\n(.*?)^```$", path.read_text(), re.M | re.S):
            assert "Client(" in skipped.group(1) or "client." in skipped.group(1), (path.name, skipped.group(1))


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if blocks(p)[0]], ids=lambda p: p.name)
def test_a_documents_python_runs_as_written(path, tmp_path):
    import joblib

    from aggregator import CollectionStatistics, build_model
    from participant import Participant

    from .conftest import TABLE_1, table_1_spec

    # The README loads a model a service exported: one of the paper's example, as `model` writes it.
    spec = table_1_spec(protocol="DE", epsilon=4.0)
    stats, device = CollectionStatistics(spec), Participant(spec)
    for row in TABLE_1 * 20:
        report = device.report(dict(zip(["age", "income", "gender", "missed_payment"], row)))
        stats.add(report.input, [report.payload])
    joblib.dump(build_model(stats, "normsub").to_sklearn_pipeline(), tmp_path / "model.joblib")
    script = "\n\n".join(blocks(path)[0])
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{path.name}:\n{run.stderr[-3000:]}"
