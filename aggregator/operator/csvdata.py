"""Your own data: any CSV as a table of features and labels, read with pandas (the simulator runs
it, ``python -m aggregator spec`` drafts a collection spec from it).

Separators are sniffed (or given), byte-order marks and quoting handled by the reader; a file
without a header names its columns by position. Missing values (by default empty cells and ``?``)
drop their rows or become a category. Columns are categorical unless declared numeric or detected
as such (every value a number and many distinct ones); numeric columns need declared ranges, since
ranges computed from the surveyed people leak information about them outside the LDP guarantee.
"""

from __future__ import annotations

import csv
import difflib
import fnmatch
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

DEFAULT_NA = ("", "?")
MANY_DISTINCT = 20  # a column of numbers with more distinct values than this is taken as numeric
MISSING_CATEGORY = "(missing)"


@dataclass
class Table:
    """A read CSV: ``X`` (m, n) strings, or floats for numeric columns with their declared
    ``ranges``; ``y`` (m,) labels as strings."""

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    label_name: str
    ranges: tuple[tuple[float, float], ...] | None = None


class DataError(ValueError):
    """The data cannot be used as asked; the message says what to change."""


class RangesMissing(DataError):
    """Numeric ``columns`` without a declared range (and ranges not taken from the data)."""

    def __init__(self, columns: list[str]):
        self.columns = list(columns)
        super().__init__(undeclared_ranges(self.columns))


class MixedColumns(DataError):
    """Both ``numeric`` and categorical (``others``) feature columns: a collection is one or the other."""

    def __init__(self, numeric: list[str], others: list[str]):
        self.numeric, self.others = list(numeric), list(others)
        super().__init__(
            f"numeric columns {self.numeric} and categorical ones {self.others} in one file: a collection is all "
            "categorical or all continuous; --drop some, or pass --categorical COL,... for the numeric ones"
        )


def from_data_warning(option: str = "--ranges-from-data") -> str:
    """The warning given whenever ranges are taken from the data (``option``: how the user asked)."""
    return (
        f"{option} takes ranges from the surveyed people themselves; that leaks information about them "
        "outside the LDP guarantee (a real collection declares them beforehand)"
    )


@dataclass
class CSVOptions:
    """How to read a CSV (the command line's data options)."""

    label: str
    sep: str | None = None  # None: sniffed
    header: bool = True
    drop: tuple[str, ...] = ()
    na_values: tuple[str, ...] = DEFAULT_NA
    missing: str = "drop"  # or "category"
    numeric: tuple[str, ...] | None = None  # declared numeric, besides those detected and those with a range
    categorical: tuple[str, ...] = ()
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    ranges_from_data: bool = False
    from_data_option: str = "--ranges-from-data"  # how the user asked for ranges from the data, for the warning


def parse_ranges(items: list[str], files: list[str] = ()) -> dict[str, tuple[float, float]]:
    """``COL=LO:HI`` items as ``{COL: (LO, HI)}``, in the order given; ``COL`` may be a shell-style
    pattern (``a*``, ``x?``, ``[ab]``: :func:`declared_ranges` expands it), an item may hold several
    separated by commas, and each of ``files`` holds one per line (``#`` starts a comment).
    Raises :class:`DataError`."""
    # A comma separates items only where another COL= follows (a column's name may hold a comma).
    items = [part.strip() for item in items for part in re.split(r",(?=[^,=]+=)", item) if part.strip()]
    for path in files:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise DataError(f"--ranges {path}: cannot read it ({exc.strerror or exc})") from None
        items += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
    ranges = {}
    for item in items:
        name, eq, bounds = item.rpartition("=")
        low, colon, high = bounds.partition(":")
        try:
            if not (eq and colon and name):
                raise ValueError
            lo, hi = float(low), float(high)
        except ValueError:
            raise DataError(f"--range takes COL=LO:HI, got {item!r}") from None
        if not np.isfinite([lo, hi]).all() or lo >= hi:
            raise DataError(f"--range {item!r}: LO and HI must be finite with LO < HI")
        ranges[name] = (lo, hi)
    return ranges


def declared_ranges(ranges: dict[str, tuple[float, float]], features: list[str]) -> dict[str, tuple[float, float]]:
    """``ranges`` (names or patterns, :func:`parse_ranges`) as a range per feature column: a
    column's own name wins, else the first pattern that matches it. Raises :class:`DataError`
    for a name or pattern that matches no feature column."""
    out = {key: bounds for key, bounds in ranges.items() if key in features}
    for key, bounds in ranges.items():
        if key in features:
            continue
        matched = fnmatch.filter(features, key)
        if not matched:
            raise DataError(f"--range {key}=...: no such feature column (features: {', '.join(features)})")
        for column in matched:
            out.setdefault(column, bounds)
    return out


def _sniff(path: Path) -> str:
    sample = path.read_text(encoding="utf-8-sig", errors="replace")[:65536]
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


SEPARATORS = (",", ";", "\t", "|", " ")


def _separator_hint(columns: list[str], sep: str) -> str:
    """When the header read with ``sep`` came out as one or two columns holding another separator
    (``a;b;class`` read with ``,``): a hint naming that separator as a shell argument, else ``""``."""
    if len(columns) > 2:
        return ""
    for other in SEPARATORS:
        if other != sep and any(other in str(c) for c in columns):
            argument = "$'\\t'" if other == "\t" else shlex.quote(other)
            return f" (the header holds {other!r}: is it the separator? pass --sep {argument})"
    return ""


def read_csv(path: str | Path, options: CSVOptions) -> tuple[Table, list[str]]:
    """The data set in ``path`` and notes for the user (what was dropped, detected or assumed);
    raises :class:`DataError` with a one-line reason."""
    import pandas as pd  # here, not at the top: the commands that only parse options never load it

    path = Path(path)
    if not path.is_file():
        raise DataError(f"CSV file {path} does not exist")
    sep = options.sep or _sniff(path)
    try:
        frame = pd.read_csv(
            path,
            sep=sep,
            header=0 if options.header else None,
            dtype=str,
            encoding="utf-8-sig",
            keep_default_na=False,
            na_values=list(options.na_values),
            skipinitialspace=True,
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} cannot be read as CSV (separator {sep!r}): {str(exc).splitlines()[0]}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    notes = [f"read {path.name}: {len(frame)} rows, {frame.shape[1]} columns, separator {sep!r}"]
    if options.header and len(set(frame.columns)) != frame.shape[1]:
        raise DataError(f"{path}: column names repeat; rename them or pass --no-header")
    columns = list(frame.columns)
    if options.label not in columns:
        where = "positions 0 to %d" % (len(columns) - 1) if not options.header else f"columns {columns}"
        close = closest(str(options.label), columns)
        hint = _separator_hint(columns, sep) or (f"; did you mean {close!r}?" if close else "")
        raise DataError(f"{path}: no column {options.label!r} for --label; the file has {where}{hint}")
    for name in options.drop:
        if name not in columns:
            close = closest(str(name), columns)
            hint = f"; did you mean {close!r}?" if close else f"; the file has {len(columns)} columns: {_named(columns)}"
            raise DataError(f"--drop {name!r}: no such column{hint}")
    frame = frame.drop(columns=list(options.drop))
    if frame.empty:
        raise DataError(f"{path} has a header but no rows")
    frame = frame.apply(lambda column: column.str.strip())
    table = table_from_frame(frame, options, str(path), notes)
    return replace(table, name=path.stem), notes


def table_from_frame(frame, options: CSVOptions, source: str, notes: list[str]) -> Table:
    """The :class:`Table` of a pandas DataFrame holding the label column ``options.label`` and the
    feature columns (strings as read from a CSV, or any values a DataFrame holds): missing values
    dropped or kept, numeric columns found (declared, or detected) and given their declared ranges
    (or, asked for, the data's, warned), what was assumed appended to ``notes``. ``source`` names
    the data in messages. Raises :class:`DataError` (:class:`RangesMissing`, :class:`MixedColumns`)."""
    missing_rows = frame.isna().any(axis=1)
    if missing_rows.any():
        if options.missing == "drop":
            frame = frame[~missing_rows]
            notes.append(f"dropped {int(missing_rows.sum())} rows with missing values (--missing category keeps them)")
        else:
            frame = frame.fillna(MISSING_CATEGORY)
            notes.append(f"{int(missing_rows.sum())} rows have missing values, kept as the category {MISSING_CATEGORY!r}")
    if frame.empty:
        raise DataError(f"{source}: no rows left after dropping those with missing values")
    label = options.label
    features = [c for c in frame.columns if c != label]
    if not features:
        raise DataError(f"{source}: no feature columns besides the label")
    y = frame[label].to_numpy(dtype=object)
    if len(set(y)) < 2:
        raise DataError(f"{source}: the label {label!r} takes a single value; a classifier needs two classes or more")
    options = replace(options, ranges=declared_ranges(options.ranges, features))
    numeric = _numeric_columns(frame, features, options, notes)
    if numeric and len(numeric) != len(features):
        raise MixedColumns(numeric, [c for c in features if c not in numeric])
    for column in features:
        if frame[column].nunique() == len(frame) and len(frame) > 20 and column not in numeric:
            notes.append(f"warning: column {column!r} is unique per row (an id?): it only adds noise; --drop {column}")
    if not numeric:
        X = frame[features].to_numpy(dtype=object)
        return Table(source, X, y, tuple(features), label)
    values = frame[features].astype(float)
    undeclared = [column for column in features if column not in options.ranges]
    if undeclared and not options.ranges_from_data:
        raise RangesMissing(undeclared)
    ranges = []
    for column in features:
        if column in options.ranges:
            ranges.append(options.ranges[column])
        else:
            low, high = float(values[column].min()), float(values[column].max())
            # A column of one value has no width: a unit around it, so that the range is a range.
            ranges.append((low, high) if low < high else (low - 0.5, high + 0.5))
    if options.ranges_from_data:
        notes.append("warning: " + from_data_warning(options.from_data_option))
    for column, (low, high) in zip(features, ranges):
        share = clipped_share(values[column].to_numpy(), low, high)
        if share > 0 and column in options.ranges:
            # Said as a share of the sample, never as the sample's extremes: those are the people's data.
            notes.append(
                f"{'warning: ' if share >= 0.05 else ''}{share:.1%} of {column!r} lies outside its declared range "
                f"{low:g}:{high:g} and is clipped to it"
                + ("; a model learns little from a range that excludes this much" if share >= 0.05 else "")
            )
    return Table(source, values.to_numpy(), y, tuple(features), label, tuple(ranges))


def undeclared_ranges(columns: list[str]) -> str:
    """The refusal of numeric ``columns`` that have no declared range: every one named, with the
    two ways to declare them."""
    first = columns[0]
    if len(columns) == 1:
        said = f"numeric column {first!r} needs a declared range"
    else:
        said = f"{len(columns)} numeric columns need a declared range each: {_named(columns)}"
    return (
        f"{said}; declare them with --range {first}=LO:HI (one per column; a pattern such as 'x*' covers several) "
        "or --ranges FILE (one COL=LO:HI a line), or, leaking outside the guarantee, --ranges-from-data"
    )


def closest(name: str, columns) -> str | None:
    """The column whose name is closest to ``name`` whatever the case (``ID``: ``id``), or None."""
    folded = {str(c).casefold(): str(c) for c in reversed(list(columns))}  # the first of equal ones
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1)
    return folded[close[0]] if close else None


def _named(columns) -> str:
    """``columns`` quoted, comma-separated."""
    return ", ".join(repr(str(c)) for c in columns)


def _numeric_columns(frame, features: list[str], options: CSVOptions, notes: list[str]) -> list[str]:
    """The numeric feature columns: every declared one (``--numeric``, and every column with a
    ``--range``, which only a number can have) and, among the rest that are not declared
    ``--categorical``, every one detected (all values numbers, many distinct). In file order."""
    import pandas as pd

    declared = {}
    for name in options.numeric or ():
        declared[name] = f"--numeric {name!r}"
    for name in options.ranges:
        declared.setdefault(name, f"--range {name}=...")
    for name, option in declared.items():
        if name not in features:
            raise DataError(f"{option}: no such feature column (features: {', '.join(features)})")
        if name in options.categorical:
            raise DataError(f"{option}: the column is also declared --categorical")
        bad = pd.to_numeric(frame[name], errors="coerce").isna()
        if bad.any():
            raise DataError(f"{option}: {frame[name][bad].iloc[0]!r} is not a number; a range needs a numeric column")
    detected = []
    for name in features:
        if name in options.categorical or name in declared:
            continue
        parsed = pd.to_numeric(frame[name], errors="coerce")
        if not parsed.isna().any() and parsed.nunique() > MANY_DISTINCT:
            detected.append(name)
    if detected:
        notes.append(
            f"numeric columns detected (every value a number, over {MANY_DISTINCT} distinct): {detected} "
            "(--categorical COL,... keeps one categorical)"
        )
    return [name for name in features if name in declared or name in detected]


def read_frame(
    frame, label, ranges=None, *, caller: str, notes: list[str], dtypes=None, missing: str = "drop", drop=()
) -> Table:
    """A pandas DataFrame read as :func:`read_csv` reads a file (:func:`table_from_frame`), for the
    Python API: column names become strings; floats are numeric, strings, booleans and pandas
    categories (and other extension types) categorical, and the rest (integers, numbers in an
    object column) numeric when they take many values, as a CSV's numbers are detected. ``ranges``:
    None, a mapping of column (or pattern) to ``(low, high)`` (a column with a range is numeric),
    or ``"data"`` for the data's least and greatest values (warned in ``notes``). ``dtypes``: the
    columns' types less the label's, when ``frame`` holds them as objects. A refusal is a
    ``ValueError`` that names ``caller``'s option (``ranges=``); a value that is neither a string
    nor a number a ``TypeError``."""
    from numbers import Number

    if ranges is not None and not (isinstance(ranges, str) and ranges == "data" or isinstance(ranges, Mapping)):
        raise ValueError(f"ranges must be a mapping of column to (low, high), 'data' or None, got {ranges!r}")
    frame = frame.rename(columns=str).drop(columns=[str(c) for c in drop])
    label = str(label)
    if label not in frame.columns:
        close = difflib.get_close_matches(label, list(frame.columns), n=1)
        raise DataError(f"no column {label!r} for label=; the table has {list(frame.columns)}"
                        + (f"; did you mean {close[0]!r}?" if close else ""))  # fmt: skip
    features = [c for c in frame.columns if c != label]
    dtypes = list(dtypes) if dtypes is not None else [frame[c].dtype for c in features]
    floats, categorical = [], []
    for name, dtype in zip(features, dtypes):
        kind = getattr(dtype, "kind", "O")
        if kind == "f":
            floats.append(name)
        elif kind == "b" or not isinstance(dtype, np.dtype):
            categorical.append(name)
        elif kind == "O":
            types = {type(v) for v in frame[name]}
            odd = [t for t in types if not issubclass(t, (str, bytes, Number, np.bool_, type(None)))]
            if odd:
                raise TypeError(f"column {name!r}: argument must be a string or a number, got {odd[0].__name__}")
            if any(issubclass(t, (str, bytes, bool, np.bool_)) for t in types):
                categorical.append(name)
    declared = {str(k): v for k, v in ranges.items()} if isinstance(ranges, Mapping) else {}
    options = CSVOptions(
        label, numeric=tuple(floats), categorical=tuple(c for c in categorical if c not in declared),
        missing=missing, ranges=declared, ranges_from_data=isinstance(ranges, str), from_data_option='ranges="data"',
    )  # fmt: skip
    try:
        return table_from_frame(frame, options, "the table", notes)
    except RangesMissing as exc:
        raise ValueError(
            f"numeric columns {exc.columns} need declared ranges: {caller}(..., ranges={{{exc.columns[0]!r}: "
            "(low, high), ...}) as the collection would publish them, or ranges=\"data\" to take them from the "
            "data (leaks outside the LDP guarantee; warned). To take every value as a category instead, pass "
            "the columns as strings"
        ) from None
    except MixedColumns as exc:
        raise ValueError(
            f"numeric columns {exc.numeric} and categorical ones {exc.others}: a collection is all numeric or all "
            "categorical; drop some columns, or pass the numeric ones as strings (every value a category)"
        ) from None


def clipped_share(values: np.ndarray, low: float, high: float) -> float:
    """The share of ``values`` outside ``[low, high]`` (a device clips them to the range)."""
    return float(np.mean((values < low) | (values > high))) if len(values) else 0.0
