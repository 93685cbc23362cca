"""Mutation testing of protocols/, participant/ (the device, the wire format and its validation)
and aggregator/statistics.py with mutmut (not run in CI: it takes about an hour on two cores).

    pip install mutmut
    python bench/mutation.py [--max-children 2] [--summary-only]

mutmut copies the project to ``mutants/``, mutates each covered line of the modules named in
``[tool.mutmut]`` of pyproject.toml (operators, constants, comparisons, arguments), and runs the
fast tests that cover it; a mutant the tests still pass is a survivor. This prints, per module,
the mutants killed, the survivors and the score, then the functions survivors sit in.

Every run starts from an empty ``mutants/``: mutmut's incremental mode measures coverage on the
previous run's mutated copies, whose lines no longer match an edited source, and silently
mutates only part of it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def summarise(root: Path) -> None:
    rows, survivors = {}, Counter()
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        module = str(meta.relative_to(root / "mutants")).removesuffix(".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        killed = sum(1 for c in codes.values() if c not in (0, None))
        alive = [k for k, c in codes.items() if c == 0]
        rows[module] = (killed, len(alive), sum(1 for c in codes.values() if c is None))
        for key in alive:
            survivors[key.split("__mutmut_")[0]] += 1
    total_killed = sum(k for k, _, _ in rows.values())
    total_alive = sum(a for _, a, _ in rows.values())
    print("| module | killed | survived | not run | score |\n|---|---|---|---|---|")
    for module, (killed, alive, skipped) in rows.items():
        if killed + alive:
            print(f"| {module} | {killed} | {alive} | {skipped} | {killed / (killed + alive):.0%} |")
    print(f"| all | {total_killed} | {total_alive} | | {total_killed / max(1, total_killed + total_alive):.1%} |")
    print("\nsurvivors by function:")
    for function, count in survivors.most_common():
        print(f"  {count:4d}  {function}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--summary-only", action="store_true", help="summarise an earlier run's mutants/")
    args = parser.parse_args()
    if not args.summary_only:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        # The data sets are found relative to the project; mutmut runs the tests from mutants/.
        env = {**os.environ, "LDPNB_DATA": os.environ.get("LDPNB_DATA", str(ROOT.parent / "shared" / "datasets"))}
        subprocess.run(["mutmut", "run", "--max-children", str(args.max_children)], cwd=ROOT, env=env, check=False)
    summarise(ROOT)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
