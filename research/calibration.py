"""The temperature ``normsub`` gives its class probabilities, per row of the estimators table: the
test log-loss it buys, and what the margin and the bootstrap's world would have given instead.

    python research/calibration.py [--reps 100] [--first-seed 0] [--cells car:0.5,...] [--jobs 2]
                                [--plot FILE.png]

Each run (protocol ``auto``, fast mode, the splits of ``bench/estimators.py``; a numerical data
set such as ``diabetes:0.5`` binned into the paper's four bins per coordinate) builds ``normsub``
at temperature 1 and scores it on the test rows at every temperature of
:data:`aggregator.estimation.calibration.TEMPERATURES`. The temperature is chosen as
:func:`~aggregator.estimation.calibration.choose_temperature` does, with the shipped margin and with margins
0, 0.002, 0.01 and 0.02, with the plug-in world (the posterior mean's class signal) in place of
the spread-matched one, softening only where both worlds gain, and with temperatures up to 4
offered as well (sharpening). Columns: the class prior alone (``prior only``), temperature 1, the
shipped choice, each alternative's paired difference from temperature 1, and the best single
temperature per run in hindsight (which no collection can know). Writes
research/results/calibration.md (or ``--out``); with ``--plot``, each cell's reliability diagram (the
share of right predictions against the confidence, at temperature 1 and at the chosen one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paired_runs import cell_parser, paired, run_cells

RESULTS = Path(__file__).with_name("results") / "calibration.md"
MARGINS = (0.0, 0.002, 0.01, 0.02)
# Temperatures above 1 (to 4), offered only to the column that may sharpen.
SHARPER = 2.0 ** np.arange(0.25, 2.01, 0.25)


def collection(data, epsilon: float, seed: int) -> tuple:
    """Seed ``seed``'s collection of ``data`` at ``epsilon`` (protocol ``auto``, fast mode; a
    numerical data set binned into the paper's four bins per coordinate) and its test rows:
    the statistics, the rows' integer codes ``(m, n)`` and their class indices ``(m,)``."""
    from participant.encoding import encode_features, encode_labels
    from sim.experiment import DEFAULT_THETA, Setup, collect, runner_for, spec_for, split

    if data.continuous:
        X_train, X_test, y_train, y_test = split(data, seed)
        spec = spec_for(data, "auto", epsilon, DEFAULT_THETA, Setup(), X_train, y_train)
        stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "fast")
        return stats, encode_features(X_test, spec), encode_labels(y_test, spec)
    runner = runner_for(data)
    _, test, _ = runner.split(seed)
    stats = runner.statistics(("auto", epsilon, DEFAULT_THETA, "one-report"), seed, "fast")
    return stats, runner.codes[test], runner.labels[test]


def cell(dataset: str, epsilon: float, reps: int, first_seed: int, plot: bool = False) -> tuple:
    """Per run, shape ``(reps, 6 + len(MARGINS))``: test log-loss of the class prior alone, at
    temperature 1, at the shipped choice, at each margin of :data:`MARGINS`, with the plug-in
    world, softening only where both worlds gain, sharpening allowed (:data:`SHARPER`), and at the
    run's best temperature of the shipped grid; the shipped choices ``(reps,)``; and with ``plot``
    every test record's confidence (its predicted class's probability) at temperature 1 and at
    the shipped one, and whether the prediction was right, shape ``(3, reps·m)`` (else None)."""
    from scipy.special import logsumexp

    from aggregator.estimation.calibration import MARGIN, TEMPERATURES, bootstrap_log_losses, expected_log_loss, pick
    from aggregator.estimation.dependence import dependence_p_value, null_probability
    from aggregator.estimation.estimators import normsub_unsmoothed
    from aggregator.estimation.smoothing import REFERENCE
    from sim.datasets import load_dataset

    data = load_dataset(dataset)
    rows, chosen, records = [], [], []
    for seed in range(first_seed, first_seed + reps):
        stats, codes, labels = collection(data, epsilon, seed)
        base = normsub_unsmoothed(stats)
        strength = REFERENCE
        model = base.model(stats.spec, strength)
        weight = null_probability(dependence_p_value(stats, base.class_count))
        # Every score on the grid that also sharpens; the shipped choice reads its first T.
        grid = np.concatenate([TEMPERATURES, SHARPER])
        soft = len(TEMPERATURES)
        null = bootstrap_log_losses(stats, normsub_unsmoothed, base, strength, "null", grid)
        worlds = {
            world: bootstrap_log_losses(stats, normsub_unsmoothed, base, strength, world, grid)
            for world in ("spread-matched", "plug-in")
        }
        sharpening = weight * null + (1 - weight) * worlds["spread-matched"]
        null, worlds = null[:soft], {world: loss[:soft] for world, loss in worlds.items()}
        scores = {world: weight * null + (1 - weight) * loss for world, loss in worlds.items()}
        agree = (null <= null[0]) & (worlds["spread-matched"] <= worlds["spread-matched"][0])
        both = np.where(agree, scores["spread-matched"], np.inf)
        both[0] = scores["spread-matched"][0]
        jll = model.joint_log_likelihood_codes(codes)
        # The test rows' log-loss: the expected one against their known classes (one-hot).
        loss = expected_log_loss(jll, np.eye(jll.shape[1])[labels], grid)
        at = {float(t): float(value) for t, value in zip(grid, loss)}
        shipped = pick(scores["spread-matched"])
        chosen.append(shipped)
        if plot:
            top = jll - jll.max(axis=1, keepdims=True)
            confidence = [np.exp(-logsumexp(t * top, axis=1)) for t in (1.0, shipped)]
            records.append(np.stack([*confidence, jll.argmax(axis=1) == labels]))
        rows.append(
            [
                -float(model.class_log_prior[labels].mean()),
                at[1.0],
                at[shipped],
                *(at[pick(scores["spread-matched"], margin=m)] for m in MARGINS),
                at[pick(scores["plug-in"], margin=MARGIN)],
                at[pick(both, margin=MARGIN)],
                at[pick(sharpening, grid)],
                float(loss[:soft].min()),
            ]
        )
    return dataset, epsilon, np.array(rows), np.array(chosen), np.concatenate(records, axis=1) if plot else None


def reliability(ax, records: np.ndarray, title: str) -> None:
    """A reliability diagram on ``ax``: per tenth of confidence, the share of right predictions
    against the mean confidence, at temperature 1 and at the shipped temperature."""
    bins = np.minimum((records[:2] * 10).astype(int), 9)
    for row, (label, style) in enumerate([("temperature 1", "o-"), ("chosen temperature", "s-")]):
        filled = [b for b in range(10) if (bins[row] == b).sum() >= 20]
        confidence = [records[row][bins[row] == b].mean() for b in filled]
        right = [records[2][bins[row] == b].mean() for b in filled]
        ax.plot(confidence, right, style, markersize=3, label=label)
    ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=0.8)
    ax.set(xlim=(0.3, 1.02), ylim=(0.3, 1.02), title=title)
    ax.title.set_fontsize(8)
    ax.tick_params(labelsize=6)


def main() -> None:
    from aggregator.estimation.calibration import MARGIN

    parser = cell_parser(__doc__)
    parser.add_argument("--first-seed", type=int, default=0, help="the first run's seed")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the table's file (default {RESULTS})")
    parser.add_argument("--plot", type=Path, help="also draw each cell's reliability diagram to this PNG")
    args = parser.parse_args()
    last = args.first_seed + args.reps - 1
    alternatives = " | ".join(f"margin {m:g} − 1" for m in MARGINS)
    lines = [
        "# The temperature of normsub's class probabilities",
        "",
        f"`python research/calibration.py --reps {args.reps} --first-seed {args.first_seed} --cells {args.cells}`: "
        f"protocol `auto`, fast mode, seeds {args.first_seed}–{last}. Test log-loss, nats per record; "
        f"differences paired with temperature 1 (± standard error). Shipped: margin {MARGIN:g}, spread-matched "
        "and null worlds. Accuracy is the same at every temperature.",
        "",
        f"| data set | ε | prior only | temperature 1 | shipped | shipped − 1 | {alternatives} "
        "| plug-in world − 1 | both worlds gain − 1 | sharpening up to 4 − 1 | best per run (hindsight) "
        "| median temperature (range) |",
        "|---|---|---|---|---|---|" + "---|" * len(MARGINS) + "---|---|---|---|---|",
    ]
    drawn = []
    for dataset, epsilon, rows, chosen, records in run_cells(cell, args, args.first_seed, args.plot is not None):
        drawn.append((f"{dataset}, ε = {epsilon:g}", records))
        sharp = rows[:, 1]
        cells = [
            f"{rows[:, 0].mean():.3f}",
            f"{sharp.mean():.3f}",
            f"{rows[:, 2].mean():.3f}",
            paired(rows[:, 2] - sharp),
        ]
        cells += [paired(rows[:, 3 + j] - sharp) for j in range(len(MARGINS) + 3)]
        cells += [f"{rows[:, -1].mean():.3f}", f"{np.median(chosen):.2f} ({chosen.min():.2f}–{chosen.max():.2f})"]
        lines.append(f"| {dataset} | {epsilon:g} | " + " | ".join(cells) + " |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        columns = 4
        rows_of_plots = -(-len(drawn) // columns)
        figure, axes = plt.subplots(rows_of_plots, columns, figsize=(10, 2.5 * rows_of_plots), squeeze=False)
        for ax, (title, records) in zip(axes.ravel(), drawn):
            reliability(ax, records, title)
        for ax in axes.ravel()[len(drawn) :]:
            ax.set_visible(False)
        axes[0, 0].legend(fontsize=6, loc="upper left")
        figure.supxlabel("confidence (the predicted class's probability)", fontsize=8)
        figure.supylabel("share of right predictions", fontsize=8)
        figure.tight_layout()
        figure.savefig(args.plot, dpi=110)
        print(f"reliability diagrams: {args.plot}")


if __name__ == "__main__":
    main()
