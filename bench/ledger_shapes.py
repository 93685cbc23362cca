"""What checking a ledger's shape costs at the largest ledger the default limits allow.

``python bench/ledger_shapes.py [--repeats N] [--against TREE] [--out FILE]`` builds that ledger
as :func:`bench.device.largest_ledger` writes it (version 5: 1,990 acknowledged entries of the
last 31 days, the memo's 1,000 answers of 8 KiB at ten origins, 335 daily sums), then measures,
in Python and in Node, the check alone (``ledger_problem`` / ``ledgerProblem`` on the parsed file,
``--repeats`` times: CPU microseconds per entry, median, which a loaded machine stretches less
than wall time) and five submits' ledger work (claim a fresh report, record it, mark it sent, as
``bench/device.py`` times them: wall milliseconds, median). With ``--against`` (a checkout of an
earlier tree, its ``participant-js`` compiled), the earlier checks run in the same processes,
each run alternating with this tree's, so both see the same load."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.device import REPORT_OVERHEAD, largest_ledger, node, node_submits, python_submits
from participant.ledger_format import ledger_problem

# The check alone in Node, on the file's parsed JSON: CPU milliseconds per run, of this tree's
# ledgerProblem and (given a directory) an earlier one's, alternating.
JS_CHECK = """
import { readFileSync } from "node:fs";
const [path, repeats, against] = [process.argv[1], Number(process.argv[2]), process.argv[3]];
const checks = [(await import(process.cwd() + "/dist/src/ledger.js")).ledgerProblem];
if (against) checks.push((await import(against + "/participant-js/dist/src/ledger.js")).ledgerProblem);
const data = JSON.parse(readFileSync(path, "utf8"));
const timings = checks.map(() => []);
for (let i = 0; i < repeats; i++)
  checks.forEach((check, j) => {
    const start = process.cpuUsage();
    const problem = check(data);
    const used = process.cpuUsage(start);
    timings[j].push((used.user + used.system) / 1000);
    if (problem !== null) throw new Error(problem);
  });
console.log(JSON.stringify(timings));
"""


def earlier_check(tree: Path):
    """``ledger_problem`` of the participant in the checkout ``tree``, imported beside this one's."""
    spec = importlib.util.spec_from_file_location(
        "earlier_participant", tree / "participant" / "__init__.py", submodule_search_locations=[str(tree / "participant")]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["earlier_participant"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("earlier_participant.ledger_format").ledger_problem


def python_check(path: Path, repeats: int, checks: list) -> list[list[float]]:
    """CPU milliseconds of each of ``checks`` on the parsed ledger at ``path``, ``repeats`` times, alternating."""
    data = json.loads(path.read_text())
    timings: list[list[float]] = [[] for _ in checks]
    for _ in range(repeats):
        for check, spent in zip(checks, timings):
            start = time.process_time()
            problem = check(data)
            spent.append((time.process_time() - start) * 1e3)
            assert problem is None, problem
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--against", type=Path, default=None, help="an earlier tree whose checks to run alongside")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures (JSON) here")
    args = parser.parse_args()
    oue = 8 * 1024 + REPORT_OVERHEAD
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        largest = scratch / "largest.json"
        entries = largest_ledger(largest, oue)
        figures = {"entries": entries}
        checks = [ledger_problem] + ([earlier_check(args.against.resolve())] if args.against else [])
        check_py = python_check(largest, args.repeats, checks)
        check_js = node(JS_CHECK, str(largest), str(args.repeats), *([str(args.against.resolve())] if args.against else []))
        for who, check in (("python", check_py), ("node", check_js)):
            for tree, timings in zip(("this tree", "earlier tree"), check):
                figures[f"{who} check CPU µs/entry, {tree}"] = statistics.median(timings) * 1e3 / entries
        for who, submits in (("python", python_submits), ("node", node_submits)):
            copies = scratch / f"{who}-copies"
            copies.mkdir()
            timings = submits(largest, copies, lambda: os.urandom(oue), False)
            figures[f"{who} submit ms"] = statistics.median(timings) * 1e3
            figures[f"{who} submit µs/entry"] = statistics.median(timings) * 1e6 / entries
    for name, value in figures.items():
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
