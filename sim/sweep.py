"""``python -m sim sweep``: accuracy over a grid of settings, as a tidy CSV and a plot.

Every (data set, protocol, ε, setting) cell is repeated ``--reps`` times with seeds
``seed, seed+1, …`` (the same splits across cells, so cells compare pairwise). Rows are appended
to ``runs.csv`` in the output folder as cells finish; rerunning the same command skips every
(cell, repetition) already there, so an interrupted sweep resumes. Work runs in parallel
processes and the result does not depend on how many: a categorical data set's cells run a block
of repetitions together (each seed's split, input choices and test rows shared, every model of a
seed scored in one product), a continuous data set's cell by cell.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from aggregator import ESTIMATORS
from aggregator.operator.csvdata import DataError, read_csv
from participant.usage import Parser, folded, listed, non_negative_int, positive_int
from protocols import DEFAULT_THETA, FREQUENCY_ORACLES, PROTOCOL_NAMES

from .cli_options import (
    add_central_options,
    add_csv_options,
    check_common,
    csv_source,
    csv_sources,
    load_source,
    output_folder,
    shuffled_for,
    training_people,
)
from .cli_options import epsilons as epsilon_list
from .datasets import ENV_VAR, DatasetNotFound, dataset_names, load_dataset
from .summary import CELL_DEFAULTS, CELL_FIELDS, FIELDS


@dataclass(frozen=True)
class Cell:
    """One point of the grid; its repetitions differ only in the seed."""

    dataset: str
    protocol: str
    eps: float
    budget: str
    model: str
    reduce: str
    components: int
    bins: int
    approach: int
    mode: str
    central_eps: float = 0.0  # the reports shuffled: the ε against the aggregator alone (eps is each person's)
    delta: float = 0.0

    def key(self) -> tuple:
        return tuple(str(v) for v in asdict(self).values())

    def setup(self):
        """The cell's :class:`~sim.experiment.Setup`."""
        from .experiment import Setup

        return Setup(self.model, self.bins or None, self.reduce or None, self.components or None, self.approach)


_DATA: dict[str, object] = {}


def _data(name: str, data_dir, sources):
    if name not in _DATA:
        _DATA[name] = load_source(name, data_dir, (sources or {}).get(name))
    return _DATA[name]


def _row(cell: Cell, name: str, per_person: float, rep: int, seed: int, result) -> dict:
    return {
        **{k: getattr(cell, k) for k in CELL_FIELDS},
        "estimator": name,
        "eps_per_person": per_person,
        "rep": rep,
        "seed": seed,
        "accuracy": result.accuracy[name],
        "nonprivate_accuracy": result.nonprivate_accuracy,
        "majority_accuracy": result.majority_accuracy,
        "log_loss": result.log_loss.get(name, ""),
        "prior_log_loss": result.prior_log_loss if result.log_loss else "",
    }


def run_cell(
    cell: Cell,
    reps: list[int],
    base_seed: int,
    estimators: tuple[str, ...],
    data_dir,
    sources=None,
    log_loss: bool = False,
) -> list[dict]:
    """The rows of ``reps`` repetitions of ``cell`` (one per estimator and repetition); a cell's
    data set is a built-in name or one of ``sources`` (name → CSV path and read options); with
    ``log_loss`` each row holds the estimator's test log-loss too."""
    from .experiment import run_once, spec_for, split

    data = _data(cell.dataset, data_dir, sources)
    setup = cell.setup()
    # Only a continuous spec's projection is fitted on the training rows: splitting connect-4's raw
    # records for a categorical spec cost more than the cell's runs.
    X_train, _, y_train, _ = split(data, base_seed) if data.continuous else (None, None, None, None)
    per_person = spec_for(data, cell.protocol, cell.eps, DEFAULT_THETA, setup, X_train, y_train, cell.budget)
    rows = []
    for rep in reps:
        seed = base_seed + rep
        result = run_once(
            data, cell.protocol, cell.eps, seed, estimators, DEFAULT_THETA, setup, cell.budget, cell.mode,
            log_loss=log_loss,
        )  # fmt: skip
        rows.extend(_row(cell, name, per_person.epsilon_per_person, rep, seed, result) for name in estimators)
    return rows


def run_categorical(
    work: list[tuple[Cell, list[int]]],
    base_seed: int,
    estimators: tuple[str, ...],
    data_dir,
    sources=None,
    log_loss: bool = False,
) -> list[dict]:
    """The rows of categorical cells of one data set (``work``: each cell and the repetitions it
    lacks). Per repetition, every cell lacking it runs together (:meth:`~sim.experiment.Runner.run_many`):
    they share the split, and their models are scored in one product. Each run is the same draw as
    run alone, so the rows do not depend on how the work was grouped."""
    from .experiment import runner_for

    runner = runner_for(_data(work[0][0].dataset, data_dir, sources))
    by_rep: dict[tuple[int, str], list[Cell]] = {}
    for cell, reps in work:
        for rep in reps:
            by_rep.setdefault((rep, cell.mode), []).append(cell)
    rows = []
    for (rep, mode), cells in sorted(by_rep.items()):
        seed = base_seed + rep
        settings = [(c.protocol, c.eps, DEFAULT_THETA, c.budget) for c in cells]
        for cell, setting, result in zip(
            cells, settings, runner.run_many(settings, seed, estimators, mode, log_loss=log_loss)
        ):
            per_person = runner.spec(*setting).epsilon_per_person
            rows.extend(_row(cell, name, per_person, rep, seed, result) for name in estimators)
    return rows


def _one_thread_each() -> None:
    """A worker's BLAS runs on one thread: the processes already take every core, and BLAS's own
    threads on top of them only contend."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


# Repetitions of a categorical data set per task: enough to share each seed's split across every
# cell, few enough that the processes stay busy to the end.
REPS_PER_TASK = 10


@dataclass(frozen=True)
class Task:
    """Work for one process: ``function(*arguments, base_seed, estimators, data_dir, sources,
    log_loss)`` gives the rows of ``runs`` runs."""

    function: Callable[..., list[dict]]
    arguments: tuple
    runs: int


def tasks(todo: list[tuple[Cell, list[int]]], categorical: set[str]) -> list[Task]:
    """``todo`` as work for the processes: one :func:`run_categorical` per categorical data set and
    block of :data:`REPS_PER_TASK` repetitions, one :func:`run_cell` per continuous cell."""
    out: list[Task] = []
    blocks: dict[tuple[str, int], list[tuple[Cell, list[int]]]] = {}
    for cell, reps in todo:
        if cell.dataset not in categorical:
            out.append(Task(run_cell, (cell, reps), len(reps)))
            continue
        for block in sorted({rep // REPS_PER_TASK for rep in reps}):
            mine = [rep for rep in reps if rep // REPS_PER_TASK == block]
            blocks.setdefault((cell.dataset, block), []).append((cell, mine))
    out.extend(Task(run_categorical, (work,), sum(len(r) for _, r in work)) for work in blocks.values())
    return out


def done_reps(path: Path, estimators: tuple[str, ...]) -> dict[tuple, set[int]]:
    """Per cell key, the repetitions ``runs.csv`` already holds for every estimator."""
    seen: dict[tuple, dict[int, set[str]]] = {}
    if path.exists():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                seen.setdefault(tuple(row.get(k) or CELL_DEFAULTS.get(k, "") for k in CELL_FIELDS), {}).setdefault(int(row["rep"]), set()).add(
                    row["estimator"]
                )
    return {key: {rep for rep, names in reps.items() if set(estimators) <= names} for key, reps in seen.items()}


def scored_log_loss(path: Path) -> bool:
    """Whether every run in the runs file at ``path`` holds its log-loss (a file begun without
    ``--log-loss``, or by a version before it, does not: resuming it with the flag would leave a
    cell's mean over some of its runs)."""
    with open(path, newline="") as f:
        return all(row.get("log_loss") for row in csv.DictReader(f))


def existing_fields(path: Path) -> list[str]:
    """The columns of the runs file at ``path``, as its header names them."""
    with open(path, newline="") as f:
        return next(csv.reader(f), FIELDS)


def _epsilons(args, dataset: str, sources) -> list[tuple[float, float, float]]:
    """``(ε per person, central ε, δ)`` of each point of the ε axis: ``--eps`` as given (central
    0), or each ``--central-eps`` with the largest local ε the data set's people allow shuffled."""
    if args.central_eps is None:
        return [(eps, 0.0, 0.0) for eps in args.eps]
    people = training_people(_data(dataset, args.data_dir, sources))
    return [(s.local, s.central, s.delta) for s in (shuffled_for(c, people, args.delta) for c in args.central_eps)]


def build_cells(args, sources=None) -> list[Cell]:
    cells = []
    for dataset in args.datasets:
        for protocol in args.protocols:
            for eps, central, delta in _epsilons(args, dataset, sources):
                for reduce in args.reduce:
                    for approach in args.approaches if args.model == "gaussian" else [3]:
                        components = args.components if reduce else 0
                        cells.append(
                            Cell(
                                dataset,
                                protocol,
                                eps,
                                args.budget,
                                args.model,
                                reduce,
                                components,
                                args.bins,
                                approach,
                                args.mode,
                                central,
                                delta,
                            )
                        )
    return cells


def _is_continuous(name: str, data_dir, sources) -> bool:
    return load_source(name, data_dir, sources.get(name)).continuous


def _reductions(text: str) -> list[str]:
    """``original,pca,dca`` (an empty item also means the original features)."""
    out = ["" if x.strip() in ("", "original", "none") else x.strip() for x in text.split(",")]
    bad = set(out) - {"", "pca", "dca"}
    if bad:
        raise argparse.ArgumentTypeError(f"unknown reduction {sorted(bad)[0]!r}; use original, pca or dca")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sim sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example (the paper's figure 2 for car):\n"
        "  python -m sim sweep --datasets car --protocols DE,SUE,OUE,SHE,THE --eps 0.5,1,2,3,4,5 --reps 100 "
        "--out results/car",
    )
    parser.add_argument(
        "--datasets", type=listed(dataset_names(), otherwise=", or pass --csv FILE"), default=[], help=f"comma-separated: {', '.join(dataset_names())}"
    )
    parser.add_argument(
        "--protocols", type=listed(PROTOCOL_NAMES, folded(PROTOCOL_NAMES)), default=list(FREQUENCY_ORACLES), help="comma-separated (default all)"
    )
    parser.add_argument("--eps", type=epsilon_list, default=[0.5, 1, 2, 3, 4, 5], help="comma-separated ε values")
    add_central_options(parser, many=True)
    parser.add_argument("--reps", type=positive_int, default=100, help="repetitions per cell (default 100)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of repetition 0 (default 0)")
    parser.add_argument(
        "--estimators", type=listed(ESTIMATORS), default=["normsub"], help=f"comma-separated: {', '.join(ESTIMATORS)}"
    )
    parser.add_argument(
        "--budget",
        choices=["one-report", "per-input", "split"],
        default="one-report",
        help="one-report (default): each person reports one input at ε; split: every input at ε/(n+1); "
        "per-input: every input at ε, (n+1)·ε a person, the paper's figures",
    )
    parser.add_argument("--mode", choices=["fast", "replay"], default="fast", help="default fast (exact distribution)")
    parser.add_argument(
        "--model",
        choices=["discrete", "gaussian"],
        default="discrete",
        help="continuous data: discrete (default, binned) or gaussian (Gaussian Naive Bayes)",
    )
    parser.add_argument(
        "--reduce", type=_reductions, default=[""], help="continuous data: comma-separated original, pca, dca"
    )
    parser.add_argument("--components", type=positive_int, default=1, help="coordinates kept by pca or dca (default 1)")
    parser.add_argument("--bins", type=non_negative_int, default=0, help="0: the paper's bins per data set")
    parser.add_argument("--approaches", type=listed((1, 2, 3), int), default=[1, 2, 3], help="gaussian model: comma-separated")
    parser.add_argument(
        "--jobs", type=positive_int, default=os.cpu_count() or 1, help="worker processes (default: all cores)"
    )
    parser.add_argument("--data-dir", metavar="DIR", help=f"folder holding the UCI files (or set ${ENV_VAR})")
    parser.add_argument(
        "--csv",
        action="append",
        default=[],
        type=csv_source,
        metavar="FILE[:LABEL[:DROP,...]]",
        help="your own data (repeat for several; each may name its own class column and columns to drop); "
        "results and plots carry the file's name without .csv",
    )
    add_csv_options(parser)
    parser.add_argument("--out", required=True, help="output folder: runs.csv, summary.csv and plots")
    parser.add_argument("--no-plot", action="store_true", help="write the CSV files without the plots")
    parser.add_argument(
        "--log-loss",
        action="store_true",
        help="also score each estimator's test log-loss (nats per record, at the model's own temperature; "
        "plotted under the accuracy). Each discrete model then runs the temperature's bootstrap",
    )
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_common(parser, args)
    if not args.datasets and not args.csv:
        parser.error("name --datasets, or --csv FILE (repeatable) for your own data")
    sources = csv_sources(args)
    clash = set(sources) & set(args.datasets)
    if clash:
        parser.error(f"--csv {sources[min(clash)][0]} has the name of a built-in data set; rename the file")
    try:
        for path, options in sources.values():  # read each once here: errors and notes before any run starts
            for note in read_csv(path, options)[1]:
                print(note, file=sys.stderr)
        for name in args.datasets:
            load_dataset(name, args.data_dir)
    except (DataError, DatasetNotFound, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    args.datasets = [*args.datasets, *sources]
    if args.bins == 1 or args.bins < 0:
        parser.error("--bins must be 0 (the paper's bins per data set) or at least 2")
    continuous = [name for name in args.datasets if _is_continuous(name, args.data_dir, sources)]
    if not continuous and (args.model == "gaussian" or any(args.reduce) or args.bins):
        parser.error(
            "every data set here is categorical: --model gaussian, --bins and --reduce apply to continuous data "
            "(australian, diabetes, or a CSV with numeric columns)"
        )
    if args.central_eps is not None and any(a == "--eps" or a.startswith("--eps=") for a in argv):
        parser.error("--eps and --central-eps: give one (with --central-eps each person's epsilon follows)")
    if args.delta is not None and args.central_eps is None:
        parser.error("--delta goes with --central-eps")
    if args.central_eps is not None and args.budget != "one-report":
        parser.error("--central-eps shuffles one report per person: it takes no --budget")
    out = output_folder(parser, args.out)
    path = out / "runs.csv"
    if args.log_loss and path.exists() and not scored_log_loss(path):
        parser.error(f"{path} holds runs without log-loss: give --log-loss another --out")
    estimators = tuple(args.estimators)
    done = done_reps(path, estimators)
    todo = []
    for cell in build_cells(args, sources):
        missing = [r for r in range(args.reps) if r not in done.get(cell.key(), set())]
        if missing:
            todo.append((cell, missing))
    total = sum(len(m) for _, m in todo)
    skipped = len(build_cells(args, sources)) * args.reps - total
    if skipped:
        print(f"resuming: {skipped} runs already in {path}", file=sys.stderr)
    from tqdm import tqdm  # here: `--help` and a refused option answer without it

    new_file = not path.exists()
    with open(path, "a", newline="") as f, tqdm(total=total, desc="sweep", unit="run") as progress:
        # A file begun by an older version keeps its columns (it had no majority_accuracy).
        writer = csv.DictWriter(f, fieldnames=FIELDS if new_file else existing_fields(path), extrasaction="ignore")
        if new_file:
            writer.writeheader()
        work = tasks(todo, {name for name in args.datasets if name not in continuous})
        common = (args.seed, estimators, args.data_dir, sources, args.log_loss)
        if args.jobs <= 1:
            for task in work:
                writer.writerows(task.function(*task.arguments, *common))
                f.flush()
                progress.update(task.runs)
        else:
            with ProcessPoolExecutor(max_workers=args.jobs, initializer=_one_thread_each) as pool:
                futures = {pool.submit(task.function, *task.arguments, *common): task.runs for task in work}
                for future in as_completed(futures):
                    writer.writerows(future.result())
                    f.flush()
                    progress.update(futures[future])
    from .plots import plot_sweep
    from .summary import summarise

    summary = summarise(path)
    print(f"{len(summary)} cells summarised in {out / 'summary.csv'}", file=sys.stderr)
    nothing = [row for row in summary if row["beats_constant"] is False]
    if nothing:
        named = "; ".join(f"{r['dataset']} {r['protocol']} eps={r['eps']} {r['estimator']}" for r in nothing[:4])
        more = f" and {len(nothing) - 4} more" if len(nothing) > 4 else ""
        print(f"{len(nothing)} of {len(summary)} cells do not beat the constant classifier by one standard error "
              f"(beats_constant in summary.csv): {named}{more}; python -m sim on one estimates the people it "
              "would need", file=sys.stderr)  # fmt: skip
    if not args.no_plot:
        for written in plot_sweep(summary, out):
            print(f"plot: {written}", file=sys.stderr)
    return 0
