"""Plots of a sweep's summary (:func:`sim.summary.summarise`), in the layout of the paper's figures 2-4."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np


def _series_label(row: dict, by: str) -> str:
    if by == "protocol":
        label = row["protocol"]
    elif by == "reduce":
        label = {"": "original", "pca": "PCA", "dca": "DCA"}[row["reduce"]]
    else:
        label = f"{row['estimator']}"
    if row["budget"] != "one-report":
        # Say what a person really spends: every input at ε.
        factor = float(row["eps_per_person"]) / float(row["eps"])
        label += f" ({row['budget']}: {factor:g}·ε per person)"
    return label


def plot_sweep(summary: list[dict], out: Path) -> list[Path]:
    """One figure per (data set, model, budget, estimator): accuracy against ε, a line per
    protocol (or per reduction for continuous data, with a panel per protocol or approach), a band
    of ± one standard deviation, the non-private accuracy dotted, and the best constant's on the test rows (the
    constant classifier a model must beat) dashed grey; below it the test log-loss, where every
    run scored it. Writes PNG and SVG; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: dict[tuple, list[dict]] = defaultdict(list)
    for row in summary:
        figures[(row["dataset"], row["model"], row["budget"], row["estimator"])].append(row)
    written = []
    for (dataset, model, budget, estimator), rows in figures.items():
        continuous = any(r["reduce"] for r in rows) or model == "gaussian"
        panel_key = ("approach" if model == "gaussian" else "protocol") if continuous else None
        series_key = "reduce" if continuous else "protocol"
        panels = sorted({r[panel_key] for r in rows}) if panel_key else [None]
        losses = all(np.isfinite(r["log_loss_mean"]) for r in rows)
        fig, axes = plt.subplots(
            2 if losses else 1,
            len(panels),
            figsize=(max(7, 5 * len(panels)), 8 if losses else 4.5),
            squeeze=False,
            sharey="row",
        )
        for column, (ax, panel) in enumerate(zip(axes[0], panels)):
            subset = [r for r in rows if panel is None or r[panel_key] == panel]
            for name in sorted({r[series_key] for r in subset}):
                line = sorted((r for r in subset if r[series_key] == name), key=lambda r: float(r["eps"]))
                eps = np.array([float(r["eps"]) for r in line])
                mean = np.array([r["accuracy_mean"] for r in line])
                std = np.array([r["accuracy_std"] for r in line])
                (handle,) = ax.plot(eps, mean, marker="o", label=_series_label(line[0], series_key))
                ax.fill_between(eps, mean - std, mean + std, color=handle.get_color(), alpha=0.15)
                ax.plot(eps, [r["nonprivate_mean"] for r in line], linestyle=":", color=handle.get_color())
                if losses:
                    loss = [r["log_loss_mean"] for r in line]
                    axes[1][column].plot(eps, loss, marker="o", color=handle.get_color())
            majority = sorted((r for r in subset if np.isfinite(r["majority_mean"])), key=lambda r: float(r["eps"]))
            if majority:  # the same splits for every series: one line
                eps = sorted({float(r["eps"]) for r in majority})
                level = [np.mean([r["majority_mean"] for r in majority if float(r["eps"]) == e]) for e in eps]
                ax.plot(eps, level, linestyle="--", color="grey", label="best constant")
                if losses:  # knowing nothing but the class shares: the log-loss a model must beat
                    level = [np.mean([r["prior_log_loss_mean"] for r in majority if float(r["eps"]) == e]) for e in eps]
                    axes[1][column].plot(eps, level, linestyle="--", color="grey", label="class shares")
                    axes[1][column].legend(fontsize=8)
            title = dataset if panel is None else f"{dataset}, {panel_key} {panel}"
            ax.set_title(title)
            ax.set_xlabel("ε (per report)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        # Half the height with log-loss below: the legend names the majority class.
        dashed = "" if losses else "; dashed: best constant"
        axes[0][0].set_ylabel(f"accuracy (dotted: without privacy{dashed})")
        if losses:
            values = [r["log_loss_mean"] for r in rows] + [r["prior_log_loss_mean"] for r in rows]
            for ax in axes[1]:
                ax.set_xlabel("ε (per report)")
                ax.grid(alpha=0.3)
                # The paper's raw estimates can cost thousands of nats where normsub's cost one.
                if min(values) > 0 and max(values) > 20 * min(values):
                    ax.set_yscale("log")
            axes[1][0].set_ylabel("test log-loss (nats per record)")
        fig.suptitle(f"LDP Naive Bayes, {model} model, budget {budget}, estimator {estimator}", fontsize=10)
        fig.tight_layout()
        # Path.with_suffix would cut a name at its first dot ("nursery.csv-..." became "nursery.png").
        stem = f"{dataset}-{model}-{budget}-{estimator}".replace("/", "_")
        for suffix in (".png", ".svg"):
            path = Path(out) / f"{stem}{suffix}"
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)
    return written
