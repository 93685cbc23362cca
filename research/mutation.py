"""Mutation testing of protocols/, participant/ and aggregator/estimation/statistics.py: the device, the wire format
and its validation, and the statistics, with mutmut (not run in CI: about half an hour on two cores).

    pip install mutmut
    python research/mutation.py [--max-children 2] [--summary-only]

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


SURVIVED = ("survived", "no tests")


def statuses_by_module(root: Path) -> dict[str, dict[str, str]]:
    """``{module path: {mutant key: mutmut status}}`` read from an earlier run's ``mutants/``."""
    from mutmut.stats import status_by_exit_code

    return {
        str(meta.relative_to(root / "mutants")).removesuffix(".meta"): {
            key: status_by_exit_code[code] for key, code in json.loads(meta.read_text())["exit_code_by_key"].items()
        }
        for meta in sorted((root / "mutants").rglob("*.py.meta"))
    }


def summarise(root: Path) -> None:
    """Per module: mutants killed, timed out (a mutant that hangs the tests counts as caught),
    survived, with no covering test (counted as survivors) and not yet run; then the score."""
    rows, survivors = {}, Counter()
    for module, statuses in statuses_by_module(root).items():
        count = Counter(statuses.values())
        rows[module] = [count["killed"], count["timeout"], count["survived"], count["no tests"], count["not checked"]]
        for key, status in statuses.items():
            if status in SURVIVED:
                survivors[key.split("__mutmut_")[0]] += 1
    print("| module | killed | timeout | survived | no test | not run | score |\n|---|---|---|---|---|---|---|")
    totals = [0] * 5
    for module, row in rows.items():
        totals = [t + r for t, r in zip(totals, row)]
        caught, run = row[0] + row[1], sum(row[:4])
        if run:
            print(f"| {module} | {' | '.join(map(str, row))} | {caught / run:.0%} |")
    caught, run = totals[0] + totals[1], sum(totals[:4])
    print(f"| all | {' | '.join(map(str, totals))} | {caught / max(1, run):.1%} |")
    print("\nsurvivors by function:")
    for function, count in survivors.most_common():
        print(f"  {count:4d}  {function}")


def list_survivors(prefixes: list[str]) -> None:
    """Each surviving mutant of the modules named by ``prefixes`` (dotted, e.g. ``protocols.mean``)
    with the line it changes, for the equivalence list."""
    from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

    os.chdir(ROOT)
    for statuses in statuses_by_module(ROOT).values():
        for key, status in statuses.items():
            if status not in SURVIVED or not key.startswith(tuple(prefixes)):
                continue
            diff = get_diff_for_mutant(key, path=find_mutant(key).path).splitlines()
            old = " ".join(line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---"))
            new = " ".join(line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++"))
            print(f"- `{key}`: `{old}` -> `{new}`")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--summary-only", action="store_true", help="summarise an earlier run's mutants/")
    parser.add_argument("--list", nargs="+", metavar="MODULE", help="list the survivors of these dotted modules")
    args = parser.parse_args()
    if args.list:
        list_survivors(args.list)
        return
    if not args.summary_only:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        # The data sets are found relative to the project; mutmut runs the tests from mutants/.
        env = {**os.environ, "LDPNB_DATA": os.environ.get("LDPNB_DATA", str(ROOT.parent / "shared" / "datasets"))}
        subprocess.run(["mutmut", "run", "--max-children", str(args.max_children)], cwd=ROOT, env=env, check=False)
    summarise(ROOT)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
