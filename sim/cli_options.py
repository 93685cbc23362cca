"""Options shared by ``python -m sim``, ``sweep`` and ``compare``: how to read a --csv file, and
the refusals every one of them makes (one line, exit code 2)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.operator.csvdata import DEFAULT_NA, CSVOptions, DataError, parse_ranges, read_csv

from .datasets import Dataset, DatasetNotFound, load_dataset


def epsilons(text: str) -> list[float]:
    """An argparse type: comma-separated ε values, each in the range a collection spec accepts."""
    from participant.spec import EPSILON_RANGE

    low, high = EPSILON_RANGE
    values = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {item!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"every epsilon must lie in [{low:g}, {high:g}], got {item}")
        values.append(value)
    if not values:
        raise argparse.ArgumentTypeError("give at least one epsilon")
    return values


def _columns(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip())


@dataclass(frozen=True)
class CSVSource:
    """One ``--csv FILE[:LABEL[:COL,...]]``: the file, and the class column and dropped columns
    that this file alone uses (``None`` and ``()``: the shared ``--label`` and ``--drop``)."""

    path: str
    label: str | None = None
    drop: tuple[str, ...] = ()

    @property
    def stem(self) -> str:
        return Path(self.path).stem


def csv_source(text: str) -> CSVSource:
    """An argparse type: ``FILE``, ``FILE:LABEL`` or ``FILE:LABEL:COL,COL`` (a file whose own name
    holds colons is taken whole); the file must exist."""
    if Path(text).is_file():
        return CSVSource(text)
    path, _, rest = text.partition(":")
    label, _, drop = rest.partition(":")
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"CSV file {path} does not exist: give the path of a readable file")
    return CSVSource(path, label.strip() or None, _columns(drop))


def add_csv_options(parser: argparse.ArgumentParser) -> None:
    """The options that say how to read a --csv file (shared by run, sweep and compare)."""
    data = parser.add_argument_group("your own data (--csv)")
    data.add_argument(
        "--label",
        metavar="COLUMN",
        help="the class column (its name, or its position with --no-header); "
        "a file's own with --csv FILE:LABEL[:DROP,...]",
    )
    data.add_argument("--sep", help="field separator (default: sniffed from the file)")
    data.add_argument("--no-header", action="store_true", help="the first row is data: columns are named 0, 1, ...")
    data.add_argument("--drop", type=_columns, default=(), metavar="COL,...", help="columns to leave out (ids, notes)")
    data.add_argument(
        "--na-values", type=_columns, default=DEFAULT_NA, metavar="V,...", help="values meaning missing (default: empty and ?)"
    )
    data.add_argument(
        "--missing", choices=["drop", "category"], default="drop", help="rows with a missing value: drop (default) or keep"
    )
    data.add_argument(
        "--numeric", type=_columns, metavar="COL,...", help="continuous columns besides those detected (printed) "
        "and those given a --range"
    )
    data.add_argument("--categorical", type=_columns, default=(), metavar="COL,...", help="columns never taken as numeric")
    data.add_argument(
        "--range", action="append", default=[], metavar="COL=LO:HI",
        help="declared range of a numeric column (repeat, or several separated by commas; COL may be a pattern, "
        "'x*=0:1'; makes the column numeric; values outside are clipped, and the share clipped is printed)"
    )
    data.add_argument(
        "--ranges", action="append", default=[], metavar="FILE",
        help="a file of declared ranges, one COL=LO:HI (or pattern) per line, # for comments",
    )
    data.add_argument(
        "--ranges-from-data",
        action="store_true",
        help="take undeclared ranges from the data (leaks outside the privacy guarantee; warned)",
    )


def csv_options(args, source: CSVSource | None = None) -> CSVOptions:
    """How to read ``source`` (default ``args.csv``): the shared options, with the file's own
    class column and dropped columns in place of ``--label`` and ``--drop`` where it names them."""
    source = source or args.csv
    return CSVOptions(
        label=source.label or args.label,
        sep=args.sep,
        header=not args.no_header,
        drop=source.drop or args.drop,
        na_values=args.na_values,
        missing=args.missing,
        numeric=args.numeric,
        categorical=args.categorical,
        ranges=parse_ranges(args.range, args.ranges),
        ranges_from_data=args.ranges_from_data,
    )


def check_common(parser: argparse.ArgumentParser, args) -> None:
    """Refusals shared by run, sweep and compare: each one line and exit code 2."""
    sources = getattr(args, "csv", None) or []
    for source in sources if isinstance(sources, list) else [sources]:
        # A spec (--spec, or a --collection's published one) names its class column.
        if not (source.label or args.label or getattr(args, "spec", None) or getattr(args, "collection", None)):
            parser.error(f"--csv {source.path}: name the class column with --label COLUMN or --csv FILE:COLUMN")
    if not sources and args.label:
        parser.error("--label applies to --csv files; the built-in data sets know their class column")
    if args.data_dir and not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such folder")


def output_folder(parser: argparse.ArgumentParser, out: str) -> Path:
    """The folder ``--out`` names, created (with its parents) before any run starts, so that a path
    that cannot be written ends the command in one line with exit code 2 instead of after the work."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        parser.exit(2, f"{parser.prog}: error: --out {out}: cannot write there ({exc.strerror or exc})\n")
    return folder


def load_data(parser: argparse.ArgumentParser, args) -> Dataset:
    """The data set ``args`` name (``--csv`` with its options, or ``--dataset``), its notes printed
    to stderr; a problem ends the command in one line with exit code 2."""
    try:
        if args.csv:
            table, notes = read_csv(args.csv.path, csv_options(args))
            for note in notes:
                print(note, file=sys.stderr)
            return Dataset(**vars(table))
        return load_dataset(args.dataset, args.data_dir)
    except (DatasetNotFound, DataError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")


def csv_sources(args) -> dict[str, tuple[str, CSVOptions]]:
    """Every ``--csv`` of a sweep by the name its results and plots carry (the file's stem, with
    ``-2``, ``-3``... where two files share one): its path and how to read it."""
    named: dict[str, tuple[str, CSVOptions]] = {}
    for source in args.csv:
        name, n = source.stem, 1
        while name in named:
            n += 1
            name = f"{source.stem}-{n}"
        named[name] = (source.path, csv_options(args, source))
    return named


def load_source(name: str, data_dir=None, csv: tuple[str, CSVOptions] | None = None) -> Dataset:
    """A built-in data set by name, or the CSV file ``csv = (path, options)`` names, under ``name``
    (its notes are dropped: the command that named it printed them once)."""
    if csv is not None:
        path, options = csv
        return dataclasses.replace(Dataset(**vars(read_csv(path, options)[0])), name=name)
    return load_dataset(name, data_dir)


def add_central_options(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """``--central-eps`` (one ε, or comma-separated ones when ``many``) and ``--delta``: simulate
    collections whose reports reach the aggregator shuffled (``protocols.shuffling``)."""
    from participant.usage import number

    group = parser.add_argument_group("shuffled reports (--central-eps)")
    group.add_argument(
        "--central-eps",
        type=epsilons if many else number(1e-6, 50),
        metavar="E,..." if many else "E",
        help="the epsilon against the aggregator alone, the reports shuffled: each person reports at the largest "
        "local epsilon that the number of people reporting allows (Feldman, McMillan and Talwar's bound); "
        "instead of --eps",
    )
    group.add_argument(
        "--flooded-eps", type=number(1e-6, 50), metavar="E",
        help="with --central-eps: also meet E against an aggregator that sends the shuffler every other report of a "
        "person's batch (the person's report among the shuffler's dummies alone)",
    )  # fmt: skip
    group.add_argument(
        "--dummies", type=number(0, 10**9, whole=True), metavar="M",
        help="with --central-eps: the shuffler's dummy reports in the batch (default: the default share of the people "
        "reporting, protocols.shuffling.DUMMY_SHARE)",
    )  # fmt: skip
    group.add_argument(
        "--delta", type=number(1e-300, 0.5), metavar="D", help="with --central-eps: delta (default 1/(10 n), n the people reporting)"
    )


@dataclass(frozen=True)
class Shuffled:
    """A collection of ``people`` reports shuffled together with a shuffler's ``dummies``:
    ``local`` ε each (what a person spends), ``central`` ε at ``delta`` against the aggregator
    alone when the batch's others are people, ``flooded`` ε when the aggregator wrote them all
    (the person's report among the dummies alone)."""

    people: int
    local: float
    central: float
    delta: float
    dummies: int = 0
    flooded: float | None = None

    def fields(self) -> dict:
        """The JSON fields every command prints for it."""
        return {
            "local_epsilon": self.local, "central_epsilon": self.central, "delta": self.delta, "dummies": self.dummies,
            "flooded_epsilon": self.flooded,
        }  # fmt: skip

    def describe(self) -> str:
        flooded = (
            f"; ({self.flooded:.3g}, {self.delta:.2g})-DP against an aggregator that floods the batch (among the "
            f"{self.dummies} dummies alone)" if self.dummies else "; no amplification against an aggregator that floods "
            "the batch (no dummies)"
        )
        return (
            f"shuffled: {self.people} reports at local eps={self.local:.4g} each, with {self.dummies} dummies, are "
            f"({self.central:.3g}, {self.delta:.2g})-DP against the aggregator alone{flooded}"
        )


def shuffled_for(
    central: float, people: int, delta: float | None = None, dummies: int | None = None, flooded: float | None = None
) -> Shuffled:
    """The largest local ε whose ``people`` reports, shuffled with ``dummies`` dummies (None: the
    default share, :func:`protocols.shuffling.default_dummies`), are (``central``, ``delta``)-DP
    against the aggregator alone and, given ``flooded``, (``flooded``, ``delta``)-DP against one
    that floods the batch (δ by :func:`protocols.shuffling.default_delta` when None), capped at
    the largest ε a spec takes."""
    from participant.spec import EPSILON_RANGE
    from protocols.shuffling import default_delta, default_dummies, guarantees, local_epsilon_for

    delta = default_delta(people) if delta is None else delta
    dummies = default_dummies(people) if dummies is None else int(dummies)
    local = local_epsilon_for(central, people, dummies, delta, flooded, ceiling=EPSILON_RANGE[1])
    found = guarantees(local, people, dummies, delta)
    return Shuffled(people, local, found["people"], delta, dummies, found["flooded"])


def training_people(data: Dataset) -> int:
    """How many people a simulated collection of ``data`` has: its training split's rows."""
    from .experiment import TEST_SIZE

    return len(data.y) - int(np.ceil(len(data.y) * TEST_SIZE))
