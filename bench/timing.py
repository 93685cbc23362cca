"""Does the moment a report leaves the device say anything about the noise in it, or the value?

    python bench/timing.py [--draws 3000] [--pace 0.005]

The device draws a histogram report (SHE, Table 1's spec, ε = 1) with its exact samplers; the exact
discrete Laplace sampler runs longer for larger noise. For each draw this measures the sampling
time alone, and the time from "spec arrived" to "report leaves" as the client paces it (the draw,
then :func:`~participant.client.pace_from`, as :meth:`participant.AsyncClient.submit` does), against
the noise's size (the sum of |K| over the report's coordinates, in grid steps). It prints Spearman's
rank correlation of each with the noise.

Then the one-bit mean mechanism (Gaussian approach 2), whose coin depends on the person's value:
its raw draw time (no pacing) at five values, interleaved, and the Kruskal–Wallis test of equal
time across them. Writes ``bench/results/timing.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np
from scipy.stats import kruskal, spearmanr

from participant import Participant
from participant.client import pace_from
from participant.encoding import record_input
from participant.randomness import SecureGenerator
from participant.spec import CollectionSpec, Feature
from protocols.mean import OneBitMean
from protocols.noise import GRID

RESULTS = Path(__file__).with_name("results") / "timing.md"
SPEC = CollectionSpec(
    [Feature("age", ["Young", "Medium", "Old"]), Feature("income", ["Low", "Medium", "High"]),
     Feature("gender", ["Male", "Female"])], ["Yes", "No"], "SHE", 1.0, label="missed_payment",
)  # fmt: skip
RECORD = {"age": "Young", "income": "Low", "gender": "Male", "missed_payment": "Yes"}


def noise_size(report, inputs) -> float:
    """Sum of |K| (grid steps) in one report: its payload less the one-hot input it randomised."""
    value = int(inputs[report.input][0])
    clean = np.zeros(len(report.payload))
    clean[value] = 1.0
    return float(np.abs(report.payload - clean).sum() / GRID)


async def measure(draws: int, pace: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(noise, sampling seconds, paced seconds)``, one entry per draw."""
    participant = Participant(SPEC)
    # RECORD holds declared values only, so no input is substituted and the generator is never read for them.
    inputs = [record_input(RECORD, SPEC, i, np.random.default_rng(0)) for i in range(SPEC.n_inputs)]
    noise, sampling, paced = np.empty(draws), np.empty(draws), np.empty(draws)
    for i in range(draws):
        arrived = time.monotonic()
        start = time.perf_counter()
        report = participant.report(RECORD)
        sampling[i] = time.perf_counter() - start
        await pace_from(arrived, pace)
        paced[i] = time.monotonic() - arrived
        noise[i] = noise_size(report, inputs)
    return noise, sampling, paced


ONE_BIT_VALUES = (-0.75, -0.1, 0.0, 0.123, 0.9)


def one_bit_times(draws: int) -> dict[float, np.ndarray]:
    """Raw seconds of one :class:`OneBitMean` draw (ε 1, 8 coordinates) per value, the values
    interleaved in a fresh random order each round (a fixed order alone shifts the times)."""
    mechanism = OneBitMean(1.0, 8)
    rng = SecureGenerator()
    order = np.random.default_rng(0)
    inputs = {v: np.full((1, 8), v) for v in ONE_BIT_VALUES}
    times = {v: np.empty(draws) for v in ONE_BIT_VALUES}
    for i in range(draws):
        for v in order.permutation(ONE_BIT_VALUES):
            start = time.perf_counter()
            mechanism.perturb(inputs[v], rng)
            times[v][i] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument("--pace", type=float, default=0.005, help="seconds (the client's default is 0.2)")
    args = parser.parse_args()
    noise, sampling, paced = asyncio.run(measure(args.draws, args.pace))
    raw = spearmanr(noise, sampling)
    padded = spearmanr(noise, paced)
    over = int((paced > args.pace * 1.5).sum())
    lines = [
        f"# Timing against noise ({args.draws} SHE draws, Table 1, epsilon 1; `python bench/timing.py`)",
        "",
        "| what the clock sees | median | 99th percentile | Spearman rho with the noise | p |",
        "|---|---|---|---|---|",
        f"| sampling alone | {np.median(sampling) * 1e6:.0f} us | {np.percentile(sampling, 99) * 1e6:.0f} us "
        f"| {raw.statistic:+.3f} | {raw.pvalue:.1e} |",
        f"| spec to send, paced at {args.pace * 1e3:g} ms | {np.median(paced) * 1e3:.2f} ms "
        f"| {np.percentile(paced, 99) * 1e3:.2f} ms | {padded.statistic:+.3f} | {padded.pvalue:.2f} |",
        "",
        f"Draws that needed a second pace: {over} of {args.draws}.",
    ]
    one_bit = one_bit_times(args.draws)
    test = kruskal(*one_bit.values())
    lines += [
        "",
        f"## The one-bit mean's raw draw time by value ({args.draws} draws each, shuffled rounds, no pacing)",
        "",
        "| value | median | 99th percentile |",
        "|---|---|---|",
        *(f"| {v:g} | {np.median(t) * 1e6:.1f} us | {np.percentile(t, 99) * 1e6:.1f} us |" for v, t in one_bit.items()),
        "",
        f"Kruskal-Wallis test of one distribution of times for every value: H = {test.statistic:.1f}, "
        f"p = {test.pvalue:.2g}.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
