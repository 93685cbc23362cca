"""How long each command line takes to answer ``--help``, against starting Python and importing
numpy in the same run (the floor every command pays).

    python bench/startup.py [--reps 7]

Writes bench/results/startup.md: the median wall time of each command over ``--reps`` runs, and
the time above the numpy floor. tests/test_startup.py keeps the imports behind these figures.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "startup.md"
COMMANDS = [
    ["-c", "import numpy"],
    ["-c", "import participant"],
    ["-c", "from participant import Client, Participant, CollectionSpec"],
    ["-m", "sim", "--help"],
    ["-m", "sim", "sweep", "--help"],
    ["-m", "sim", "compare", "--help"],
    ["-m", "sim", "plan", "--help"],
    ["-m", "aggregator", "--help"],
    ["-m", "aggregator", "serve", "--help"],
    ["-m", "aggregator", "status", "--help"],
]


def median_seconds(args: list[str], reps: int) -> float:
    """Median wall time (s) of ``python args`` over ``reps`` runs."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-c", "import sim.cli, aggregator.operator.cli"], check=True)  # warm the byte-code cache
    floor = median_seconds(COMMANDS[0], args.reps)
    lines = [
        f"# Command-line start-up (`python bench/startup.py --reps {args.reps}`)",
        "",
        "| command | median s | above `python -c 'import numpy'` |",
        "|---|---|---|",
        f"| python -c 'import numpy' | {floor:.3f} | |",
    ]
    for command in COMMANDS[1:]:
        seconds = median_seconds(command, args.reps)
        lines.append(f"| python {' '.join(command)} | {seconds:.3f} | +{seconds - floor:.3f} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
