"""The README's install table says what each extra brings, as pyproject.toml declares it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def test_the_install_table_names_every_package_each_extra_brings():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "README.md").read_text()
    rows = {m.group(1): m.group(2).lower() for m in re.finditer(r'^\| `pip install "?(ldpnb(?:\[\w+\])?)"?` \|[^|]*\|([^|]*)\|', readme, re.M)}
    expected = {"ldpnb": project["dependencies"]}
    for extra, requirements in project["optional-dependencies"].items():
        own = [r for r in requirements if not r.startswith("ldpnb[")]  # what another extra brings is named by it
        if f"ldpnb[{extra}]" in rows:
            expected[f"ldpnb[{extra}]"] = own
    assert set(expected) >= {"ldpnb", "ldpnb[aggregator]", "ldpnb[sim]"}, rows
    for install, requirements in expected.items():
        for requirement in requirements:
            assert requirement_name(requirement) in rows[install].replace(" ", ""), (install, requirement, rows[install])
