"""Bytes on the wire per report, per protocol, for typical specs.

    python bench/wire_sizes.py

A report is the msgpack map ``{id: 16 bytes, spec: 32 bytes, input, value}`` (plus a 24-byte token for collections
with enrollment); the HTTP request around it adds its headers. The body's size depends on the
input a person happens to report (each input has its own domain), so the table gives the mean
over the inputs (what a population sends on average) and the largest.
"""

from __future__ import annotations

import numpy as np

from participant import CollectionSpec, Feature, Participant
from participant.continuous import ContinuousFeature, Preparation
from participant.wire import pack_report

PROTOCOLS = ["DE", "SUE", "OUE", "SHE", "THE"]


def specs() -> dict[str, tuple[CollectionSpec, dict]]:
    table_1 = [Feature("age", ["Young", "Medium", "Old"]), Feature("income", ["Low", "Medium", "High"]),
               Feature("gender", ["Male", "Female"])]  # fmt: skip
    record_1 = {"age": "Young", "income": "Low", "gender": "Male", "class": "Yes"}
    board = [Feature(f"c{i}", ["x", "o", "b"]) for i in range(42)]  # connect-4: 42 cells, 3 classes
    record_2 = {**{f"c{i}": "b" for i in range(42)}, "class": "win"}
    out = {}
    for protocol in PROTOCOLS:
        out[f"Table 1 (3 features, 2 classes), {protocol}"] = (
            CollectionSpec(table_1, ["Yes", "No"], protocol, 1.0), record_1)
        out[f"connect-4 (42 features of 3, 3 classes), {protocol}"] = (
            CollectionSpec(board, ["win", "loss", "draw"], protocol, 1.0), record_2)  # fmt: skip
    inputs = [ContinuousFeature(f"x{i}", 0.0, 1.0) for i in range(8)]
    record_3 = {**{f"x{i}": 0.5 for i in range(8)}, "class": "a"}
    for approach in (1, 2, 3):
        spec = CollectionSpec([], ["a", "b"], "DE", 1.0, continuous=Preparation(inputs), model="gaussian", approach=approach)
        out[f"Gaussian NB, 8 features, 2 classes, approach {approach}"] = (spec, record_3)
    return out


def main() -> None:
    print("| spec | mean bytes per report | largest |")
    print("|---|---|---|")
    rng = np.random.default_rng(0)
    for name, (spec, record) in specs().items():
        participant = Participant(spec, rng=rng)
        sizes = {}
        for _ in range(40 * spec.n_inputs):
            report = participant.report(record)
            sizes[report.input] = len(pack_report(report, spec))
        values = [sizes[i] for i in range(spec.n_inputs)]
        print(f"| {name} | {np.mean(values):.0f} | {max(values)} |")


if __name__ == "__main__":
    main()
