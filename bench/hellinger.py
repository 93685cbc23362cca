"""The poster's setting: mean Hellinger distance between released and true posterior.

    python bench/hellinger.py [--sizes 100,200,300,400,500,600] [--eps 1] [--delta 1e-8]

Beta(1, 1) prior, balanced data (n/2 ones), exact expectations over the mechanisms' output
distributions (no sampling error).
"""

from __future__ import annotations

import argparse

from sim.baselines.hellinger import expected_distance, exponential_mechanism_probabilities, laplace_probabilities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,200,300,400,500,600")
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-8)
    args = parser.parse_args()
    print("| n | smoothed-Hellinger exp. mechanism | Laplace, sensitivity 1 | Laplace, sensitivity 2 |")
    print("|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        a = n // 2
        em = expected_distance(exponential_mechanism_probabilities(a, n, args.eps, args.delta), a, n)
        lap1 = expected_distance(laplace_probabilities(a, n, args.eps, 1.0), a, n)
        lap2 = expected_distance(laplace_probabilities(a, n, args.eps, 2.0), a, n)
        print(f"| {n} | {em:.4f} | {lap1:.4f} | {lap2:.4f} |")


if __name__ == "__main__":
    main()
