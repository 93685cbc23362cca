"""A sweep's ``runs.csv``: its columns, and its summary per cell (``summary.csv``)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

FIELDS = [
    "dataset",
    "protocol",
    "eps",
    "estimator",
    "budget",
    "eps_per_person",
    "model",
    "reduce",
    "components",
    "bins",
    "approach",
    "mode",
    "rep",
    "seed",
    "accuracy",
    "nonprivate_accuracy",
    "majority_accuracy",
    "log_loss",
    "prior_log_loss",
    "central_eps",
    "delta",
]
CELL_FIELDS = [
    "dataset", "protocol", "eps", "budget", "model", "reduce", "components", "bins", "approach", "mode", "central_eps",
    "delta",
]  # fmt: skip
# A runs file begun before shuffled reports were simulated has no central_eps or delta: its runs are direct.
CELL_DEFAULTS = {"central_eps": "0.0", "delta": "0.0"}


def summarise(runs_csv: Path) -> list[dict]:
    """Mean and standard deviation of accuracy per cell and estimator, and the mean accuracies
    without privacy and of the constant classifier that predicts the training split's majority
    class (``majority_mean``, NaN for runs files written before it was recorded), and the mean
    test log-loss in nats (``log_loss_mean``, NaN unless every run of the cell scored it) beside
    that of the training split's class shares (``prior_log_loss_mean``); the mean paired gain over
    the constant classifier, its standard error and whether it exceeds one
    (:func:`sim.verdict.verdict`: ``gain_over_constant``, ``gain_over_constant_se``,
    ``beats_constant``); also written next to the runs as ``summary.csv``."""
    from .verdict import verdict

    groups: dict[tuple, list[dict]] = defaultdict(list)
    with open(runs_csv, newline="") as f:
        for row in csv.DictReader(f):
            groups[tuple(row.get(k) or CELL_DEFAULTS.get(k, "") for k in [*CELL_FIELDS, "estimator"])].append(row)
    summary = []
    for key, rows in sorted(groups.items()):
        acc = np.array([float(r["accuracy"]) for r in rows])
        nonprivate = np.array([float(r["nonprivate_accuracy"]) for r in rows])
        majority = [r.get("majority_accuracy") or "nan" for r in rows]
        # A mean over some of the runs would not pair with the accuracy's: all of them, or none.
        losses = [r.get("log_loss") or "" for r in rows]
        loss = np.mean([float(x) for x in losses]) if all(losses) else float("nan")
        constant = [r.get("prior_log_loss") or "" for r in rows]
        prior_loss = np.mean([float(x) for x in constant]) if all(losses) and all(constant) else float("nan")
        majority = np.array([float(m) for m in majority])
        # One repetition gives no paired standard error (runs.csv holds no test-split size).
        found = verdict(acc, majority, 0) if np.isfinite(majority).all() and len(acc) > 1 else None
        summary.append(
            {
                **dict(zip([*CELL_FIELDS, "estimator"], key)),
                "eps_per_person": rows[0]["eps_per_person"],
                "reps": len(rows),
                "accuracy_mean": acc.mean(),
                "accuracy_std": acc.std(),
                "nonprivate_mean": nonprivate.mean(),
                "majority_mean": majority.mean(),
                "gain_over_constant": found.gain if found else float("nan"),
                "gain_over_constant_se": found.se if found else float("nan"),
                "beats_constant": found.learned if found else "",
                "log_loss_mean": loss,
                "prior_log_loss_mean": prior_loss,
            }
        )
    with open(Path(runs_csv).with_name("summary.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0]) if summary else ["empty"])
        writer.writeheader()
        writer.writerows(summary)
    return summary
