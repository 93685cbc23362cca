"""Options shared by ``python -m sim``, ``sweep`` and ``compare``: how to read a --csv file, and
the refusals every one of them makes (one line, exit code 2)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from aggregator.csvdata import DEFAULT_NA, CSVOptions, DataError, parse_ranges, read_csv

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


def add_csv_options(parser: argparse.ArgumentParser) -> None:
    """The options that say how to read a --csv file (shared by run, sweep and compare)."""
    data = parser.add_argument_group("your own data (--csv)")
    data.add_argument("--label", metavar="COLUMN", help="the class column (its name, or its position with --no-header)")
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
        "--numeric", type=_columns, metavar="COL,...", help="continuous columns (default: detected, and printed)"
    )
    data.add_argument("--categorical", type=_columns, default=(), metavar="COL,...", help="columns never taken as numeric")
    data.add_argument(
        "--range", action="append", default=[], metavar="COL=LO:HI", help="declared range of a numeric column (repeat)"
    )
    data.add_argument(
        "--ranges-from-data",
        action="store_true",
        help="take undeclared ranges from the data (leaks outside the privacy guarantee; warned)",
    )


def csv_options(args) -> CSVOptions:
    return CSVOptions(
        label=args.label,
        sep=args.sep,
        header=not args.no_header,
        drop=args.drop,
        na_values=args.na_values,
        missing=args.missing,
        numeric=args.numeric,
        categorical=args.categorical,
        ranges=parse_ranges(args.range),
        ranges_from_data=args.ranges_from_data,
    )


def check_common(parser: argparse.ArgumentParser, args) -> None:
    """Refusals shared by run, sweep and compare: each one line and exit code 2."""
    if getattr(args, "csv", None) and not args.label and not getattr(args, "spec", None):
        parser.error("--csv needs --label COLUMN naming the class column")
    if not getattr(args, "csv", None) and args.label:
        parser.error("--label applies to --csv files; the built-in data sets know their class column")
    if args.data_dir and not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such folder")


def load_data(parser: argparse.ArgumentParser, args) -> Dataset:
    """The data set ``args`` name (``--csv`` with its options, or ``--dataset``), its notes printed
    to stderr; a problem ends the command in one line with exit code 2."""
    try:
        if args.csv:
            table, notes = read_csv(args.csv, csv_options(args))
            for note in notes:
                print(note, file=sys.stderr)
            return Dataset(**vars(table))
        return load_dataset(args.dataset, args.data_dir)
    except (DatasetNotFound, DataError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")


def load_source(source: str, data_dir=None, options: CSVOptions | None = None) -> Dataset:
    """A built-in data set by name, or a CSV file read with ``options`` (its notes are dropped:
    the command that named it printed them once)."""
    if options is not None and (source.endswith(".csv") or Path(source).is_file()):
        return Dataset(**vars(read_csv(source, options)[0]))
    return load_dataset(source, data_dir)
