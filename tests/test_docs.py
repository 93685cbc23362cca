"""The documentation builds: every page, link, anchor and included results file resolves
(`mkdocs build --strict`), and the README stays a page a newcomer reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "reference" / "participant" / "index.html").read_text().count("doc-function") > 20
    # Docstrings' Sphinx roles become links (docs_build/sphinx_roles.py), never raw text.
    raw = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj):(?:<code>|`)")
    pages = {page.relative_to(site): page.read_text() for page in site.rglob("*.html")}
    assert not {str(page) for page, text in pages.items() if raw.search(text)}
    reference = pages[Path("reference/participant/index.html")] + pages[Path("reference/aggregator/index.html")]
    assert reference.count('class="autorefs autorefs-internal"') > 100


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (ROOT / target).exists(), target
