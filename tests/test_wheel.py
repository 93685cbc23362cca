"""The wheel alone: built from this checkout's packages (offline: no build isolation), it holds
the packages, the paper's data sets and nothing else; installed without extras into a fresh
virtual environment (its dependencies from the package index), it holds no machine-learning or
plotting stack, says which extra the aggregator and the simulator need, and sends a report to a
real aggregator."""

import asyncio
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sim.datasets import DATASETS

from .conftest import table_1_spec
from .test_service import sqlite_service  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocols", "participant", "aggregator", "sim", "shuffler", "ldpnb")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout's packages, built once from a copy of them (no stale build
    folder can slip in) with the installed setuptools (no network)."""
    source = tmp_path_factory.mktemp("source")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source))
    (built,) = dist.glob("ldpnb-*.whl")
    return built


def test_the_wheel_holds_the_packages_and_their_data_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {*PACKAGES, next(t for t in tops if t.endswith(".dist-info"))}
    data = {name for name in names if name.startswith("sim/data/")}
    assert data == {f"sim/data/{info.filename}.gz" for info in DATASETS.values()} | {"sim/data/README.md"}
    shipped = {Path(name).suffix for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert shipped <= {".py", ".json", ".html", ".svg", ".gz", ".md", ".typed"}, shipped
    # The six data sets are about 360 KB compressed; the code a few hundred more.
    assert wheel.stat().st_size < 2_000_000, wheel.stat().st_size

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
import ldpnb
from participant import AlreadyReported, Client
assert ldpnb.Client is Client and ldpnb.AlreadyReported is AlreadyReported
try:
    ldpnb.LDPNaiveBayes
except ModuleNotFoundError as exc:
    assert "pip install 'ldpnb[" in str(exc), exc
else:
    raise AssertionError("LDPNaiveBayes imported without its extra")
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


async def test_the_wheel_installs_and_reports_without_extras(wheel, sqlite_service, tmp_path):  # noqa: F811
    service = sqlite_service  # the device does not care which database the service uses
    await service.create(table_1_spec(protocol="OUE"))

    def build_and_run() -> str:
        env = tmp_path / "env"
        # Without a pip of its own (ensurepip's install costs 7 s of CPU): this pip installs into it.
        run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(env))
        run(sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", str(wheel))
        return run(str(env / "bin" / "python"), "-c", DEVICE, service.url, str(tmp_path / "ledger.json"), cwd=tmp_path).stdout

    out = await asyncio.to_thread(build_and_run)
    assert out.split() == ["accepted", "refused"]
    assert await service.n_reports() == 1
