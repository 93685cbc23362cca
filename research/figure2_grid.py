"""Time the paper's full figure-2 grid: 4 data sets x 5 protocols x 10 ε x 100 repetitions.

    python research/figure2_grid.py [--reps 100] [--jobs 2] [--modes fast,replay] [--estimators paper]

Runs ``python -m sim sweep`` in each mode into a fresh temporary folder (no resume) and prints
the wall-clock time of each. ``--estimators`` is passed to the sweep (default ``paper``, the
estimator of the paper's figure; or ``normsub``, the default).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

EPS = "0.5,1,1.5,2,2.5,3,3.5,4,4.5,5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--modes", default="fast,replay")
    parser.add_argument("--estimators", default="paper")
    args = parser.parse_args()
    runs = 4 * 5 * 10 * args.reps
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run(
                [
                    sys.executable, "-m", "sim", "sweep", "--datasets", "car,chess,mushroom,connect-4",
                    "--protocols", "DE,SUE,OUE,SHE,THE", "--eps", EPS, "--reps", str(args.reps),
                    "--mode", mode, "--jobs", str(args.jobs), "--out", out, "--no-plot", "--estimators", args.estimators,
                ],
                check=True,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            elapsed = time.perf_counter() - start
        print(
            f"{mode:6s} {args.estimators} {runs:,} runs in {elapsed:6.1f} s ({runs / elapsed:,.0f} runs/s, "
            f"{args.jobs} processes)",
            flush=True,
        )


if __name__ == "__main__":
    main()
