"""Throughput of perturb + aggregate for each frequency oracle, on one core.

    python bench/protocol_throughput.py [--users 1000000] [--domain 64] [--chunk 65536]

Users are processed in chunks (as a simulator or a batch ingest would) so memory stays bounded.
Prints users/second per protocol and writes ``bench/results/protocol_throughput.md``; targets:
DE >= 1,000,000/s, SUE/OUE >= 500,000/s.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from protocols import FREQUENCY_ORACLES, OracleState, make_oracle

RESULTS = Path(__file__).with_name("results") / "protocol_throughput.md"


def throughput(protocol: str, users: int, domain: int, chunk: int, seed: int = 0) -> float:
    """Users per second for perturbing and aggregating ``users`` uniform values."""
    oracle = make_oracle(protocol, 1.0, domain)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, domain, users)
    state = OracleState.empty(domain)
    start = time.perf_counter()
    for lo in range(0, users, chunk):
        state = state + oracle.aggregate(oracle.perturb(values[lo : lo + chunk], rng))
    elapsed = time.perf_counter() - start
    assert state.n == users
    return users / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    lines = [
        f"# Perturb + aggregate on one core (`python bench/protocol_throughput.py --users {args.users} "
        f"--domain {args.domain}`, best of {args.repeat})",
        "",
        "| protocol | users/s |",
        "|---|---|",
    ]
    print(lines[0])
    for protocol in FREQUENCY_ORACLES:
        best = max(throughput(protocol, args.users, args.domain, args.chunk, seed) for seed in range(args.repeat))
        lines.append(f"| {protocol} | {best:,.0f} |")
        print(lines[-1], flush=True)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
