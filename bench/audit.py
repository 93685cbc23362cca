"""The empirical privacy audit at more ε values and samples than the test suite runs.

    python bench/audit.py [--samples 2000000] [--eps 0.1,0.5,1,2,4,8]

For every mechanism and ε prints the audited lower bound on ε (99.9% confidence); every bound
must be at most the stated ε, and the closer it is, the sharper the audit. Writes
``bench/results/audit.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from protocols import FREQUENCY_ORACLES, make_oracle
from protocols.audit import audit
from protocols.mean import LaplaceMean, OneBitMean

RESULTS = Path(__file__).with_name("results") / "audit.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--eps", default="0.1,0.5,1,2,4,8")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    epsilons = [float(e) for e in args.eps.split(",")]
    lines = [
        f"# Audited lower bounds on ε, 99.9 % confidence (`python bench/audit.py --samples {args.samples} --eps {args.eps}`)",
        "",
        "| mechanism | " + " | ".join(f"ε={e:g}" for e in epsilons) + " |",
        "|---|" + "---|" * len(epsilons),
    ]
    print("\n".join(lines))
    failures = 0
    for name in [*FREQUENCY_ORACLES, "LaplaceMean", "OneBitMean"]:
        cells = []
        for eps in epsilons:
            if name == "LaplaceMean":
                mech, a, b = LaplaceMean(eps, 2, 2.0), [1.0, 0.0], [-1.0, 0.0]
            elif name == "OneBitMean":
                mech, a, b = OneBitMean(eps, 2), [1.0, 0.0], [-1.0, 0.0]
            else:
                mech, a, b = make_oracle(name, eps, 8), 0, 1
            bound = audit(mech, a, b, args.samples, rng).epsilon_lower_bound
            failures += bound > eps
            cells.append(f"{bound:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines += ["", f"{failures} bound(s) above the stated ε."]
    print(lines[-1])
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
