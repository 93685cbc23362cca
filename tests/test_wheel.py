"""The wheel alone: built from this checkout, installed without extras into a fresh virtual
environment, it holds no machine-learning or plotting stack, says which extra the aggregator and
the simulator need, and sends a report to a real aggregator."""

import asyncio
import subprocess
import sys
from pathlib import Path

from .conftest import table_1_spec
from .test_service import sqlite_service  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]

DEVICE = """
import importlib.util, subprocess, sys
absent = [m for m in ("sklearn", "scipy", "matplotlib", "sqlite_utils", "tqdm") if importlib.util.find_spec(m)]
assert not absent, absent
try:
    import aggregator
except ModuleNotFoundError as exc:
    assert "pip install 'ldpnb[aggregator]'" in str(exc), exc
else:
    raise AssertionError("aggregator imported without its extra")
cli = subprocess.run([sys.executable, "-m", "sim", "--help"], capture_output=True, text=True)
assert cli.returncode == 2 and cli.stderr.count("\\n") == 1 and "ldpnb[sim]" in cli.stderr, cli.stderr
from participant import AlreadyReported, Client
client = Client(sys.argv[1], ledger=sys.argv[2])
print(client.submit("c1", dict(age="Young", income="Low", gender="Male", missed_payment="Yes")))
try:
    client.submit("c1", dict(age="Old", income="Low", gender="Male", missed_payment="No"))
except AlreadyReported:
    print("refused")
"""


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


async def test_the_wheel_installs_and_reports_without_extras(sqlite_service, tmp_path):  # noqa: F811
    service = sqlite_service  # the device does not care which database the service uses
    await service.create(table_1_spec(protocol="OUE"))

    def build_and_run() -> str:
        run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT))
        (wheel,) = (tmp_path / "dist").glob("ldpnb-*.whl")
        env = tmp_path / "env"
        run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(env))
        run(str(env / "bin" / "pip"), "install", "-q", str(wheel))
        return run(str(env / "bin" / "python"), "-c", DEVICE, service.url, str(tmp_path / "ledger.json"), cwd=tmp_path).stdout

    out = await asyncio.to_thread(build_and_run)
    assert out.split() == ["accepted", "refused"]
    assert await service.n_reports() == 1
