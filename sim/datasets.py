"""Loading the UCI data sets the paper evaluates on, and any categorical CSV.

The paper's six data sets ship inside this package (``sim/data/``, gzip-compressed, with their
licence and citation in ``sim/data/README.md``) and are read from there first: they work offline.
Other data files (the corpus, a file the package does not hold) are looked for, in order, in the
folder passed as ``data_dir`` (``--data-dir``), the folder in the ``LDPNB_DATA`` environment
variable, ``../shared/datasets`` beside the project (and beside the working directory), and the
download cache ``~/.cache/ldpnb``. When none holds the file and the machine is online, it is
downloaded from the UCI repository into the cache.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from aggregator.operator.csvdata import Table

ENV_VAR = "LDPNB_DATA"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ldpnb"
PACKAGED_DIR = Path(__file__).resolve().parent / "data"  # the six data sets, gzip-compressed
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/"


class DatasetNotFound(FileNotFoundError):
    """No data file where the loader looked; the message lists the places and how to fix it."""


@dataclass(frozen=True)
class DatasetInfo:
    """Where a data set's file is and how to parse it. ``ranges`` (continuous data sets) are the
    declared ``[low, high]`` of each feature, in column order without the label."""

    name: str
    filename: str
    columns: tuple[str, ...]
    label_column: int
    url: str | None
    delimiter: str | None = ","
    ranges: tuple[tuple[float, float], ...] | None = None


@dataclass
class Dataset(Table):
    """A data set: raw values ``X`` (m, n) and labels ``y`` (m,) as strings (the fields of a
    :class:`~aggregator.operator.csvdata.Table`).

    Categorical data sets hold strings in ``X``; ``categories[i]`` lists feature ``i``'s values
    and ``classes`` the labels, sorted: the public domain a collection spec declares. Continuous
    data sets hold floats in ``X`` and declare each feature's range in ``ranges``.
    """

    @property
    def continuous(self) -> bool:
        return self.ranges is not None

    @cached_property
    def categories(self) -> list[list[str]]:
        return [sorted(set(self.X[:, i].tolist())) for i in range(self.X.shape[1])]

    @cached_property
    def classes(self) -> list[str]:
        return sorted(set(self.y.tolist()))

    def rows(self, index) -> Dataset:
        """The data set of the rows ``index`` (an integer array; repeats allowed) with this one's
        declared domain: a category or class the rows miss is still declared."""
        from dataclasses import replace

        subset = replace(self, X=self.X[index], y=self.y[index])
        if not self.continuous:
            subset.categories = self.categories  # set, not derived: cached_property allows it
        subset.classes = self.classes
        return subset


def _board(columns: str, rows: int) -> tuple[str, ...]:
    return tuple(f"{c}{r}" for c in columns for r in range(1, rows + 1))


_CHESS = [
    "bkblk",
    "bknwy",
    "bkon8",
    "bkona",
    "bkspr",
    "bkxbq",
    "bkxcr",
    "bkxwp",
    "blxwp",
    "bxqsq",
    "cntxt",
    "dsopp",
    "dwipd",
    "hdchk",
    "katri",
    "mulch",
    "qxmsq",
    "r2ar8",
    "reskd",
    "reskr",
    "rimmx",
    "rkxwp",
    "rxmsq",
    "simpl",
    "skach",
    "skewr",
    "skrxp",
    "spcop",
    "stlmt",
    "thrsk",
    "wkcti",
    "wkna8",
    "wknck",
    "wkovl",
    "wkpos",
    "wtoeg",
]
_MUSHROOM = [
    "cap-shape",
    "cap-surface",
    "cap-color",
    "bruises",
    "odor",
    "gill-attachment",
    "gill-spacing",
    "gill-size",
    "gill-color",
    "stalk-shape",
    "stalk-root",
    "stalk-surface-above-ring",
    "stalk-surface-below-ring",
    "stalk-color-above-ring",
    "stalk-color-below-ring",
    "veil-type",
    "veil-color",
    "ring-number",
    "ring-type",
    "spore-print-color",
    "population",
    "habitat",
]

DATASETS: dict[str, DatasetInfo] = {
    "car": DatasetInfo(
        "car",
        "car.data",
        ("buying", "maint", "doors", "persons", "lug_boot", "safety", "class"),
        -1,
        _UCI + "car/car.data",
    ),
    "chess": DatasetInfo(
        "chess", "kr-vs-kp.data", (*_CHESS, "class"), -1, _UCI + "chess/king-rook-vs-king-pawn/kr-vs-kp.data"
    ),
    "mushroom": DatasetInfo(
        "mushroom", "agaricus-lepiota.data", ("class", *_MUSHROOM), 0, _UCI + "mushroom/agaricus-lepiota.data"
    ),
    # UCI publishes connect-4 only compressed (.Z), which Python cannot read: no download.
    "connect-4": DatasetInfo("connect-4", "connect-4.data", (*_board("abcdefg", 6), "class"), -1, None),
}
# Continuous data sets. Their declared ranges are what an operator would publish before
# collecting, from the UCI attribute descriptions and plain plausibility, rounded outward; they
# are not computed from the data. Australian's eight categorical attributes are integer codes and
# are treated as numbers, as the paper treats all 14 attributes. Pima's zeros mark missing values
# in several columns; they are kept as zeros, as the paper appears to.
DATASETS["australian"] = DatasetInfo(
    "australian",
    "australian.dat",
    tuple(f"A{i}" for i in range(1, 15)) + ("class",),
    -1,
    _UCI + "statlog/australian/australian.dat",
    delimiter=None,
    ranges=(
        (0, 1), (10, 85), (0, 30), (1, 3), (1, 14), (1, 9), (0, 30),
        (0, 1), (0, 1), (0, 70), (0, 1), (1, 3), (0, 2000), (0, 100001),
    ),
)  # fmt: skip
DATASETS["diabetes"] = DatasetInfo(
    "diabetes",
    "pima-indians-diabetes.data",
    (
        "pregnancies", "glucose", "blood_pressure", "skin_thickness",
        "insulin", "bmi", "diabetes_pedigree", "age", "class",
    ),
    -1,
    None,  # withdrawn from the UCI repository
    ranges=((0, 20), (0, 200), (0, 130), (0, 100), (0, 900), (0, 70), (0, 2.5), (20, 90)),
)  # fmt: skip
ALIASES = {
    "kr-vs-kp": "chess",
    "connect4": "connect-4",
    "agaricus-lepiota": "mushroom",
    "pima": "diabetes",
    "pima-indians-diabetes": "diabetes",
}


def dataset_names() -> list[str]:
    return list(DATASETS)


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for data files, in order."""
    dirs = []
    if data_dir:
        dirs.append(Path(data_dir))
    if os.environ.get(ENV_VAR):
        dirs.append(Path(os.environ[ENV_VAR]))
    project_root = Path(__file__).resolve().parents[1]
    dirs += [project_root.parent / "shared" / "datasets", Path.cwd().parent / "shared" / "datasets", CACHE_DIR]
    unique = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def packaged_file(info: DatasetInfo) -> Path | None:
    """The package's compressed copy of the data set's file (``<filename>.gz``), or None."""
    path = PACKAGED_DIR / f"{info.filename}.gz"
    return path if path.is_file() else None


def find_data_file(info: DatasetInfo, data_dir=None, download: bool = True) -> Path:
    """The path of ``info``'s file: the package's own copy (gzip-compressed) when it holds one,
    else the first of :func:`search_dirs` that does, else a download into the cache if allowed
    and possible; raises :class:`DatasetNotFound` naming every place looked in."""
    packaged = packaged_file(info)
    if packaged is not None:
        return packaged
    dirs = search_dirs(data_dir)
    for d in dirs:
        if (d / info.filename).is_file():
            return d / info.filename
    problem = "no download address is known for it"
    if download and info.url:
        target = CACHE_DIR / info.filename
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(info.url, timeout=20) as response:
                data = response.read()
            partial = target.with_suffix(target.suffix + ".part")
            partial.write_bytes(data)
            partial.replace(target)  # a download cut short never stands in for the file
            return target
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            problem = f"it could not be downloaded from {info.url} ({reason})"
    looked = ", ".join(str(d) for d in dirs)
    raise DatasetNotFound(
        f"data set {info.name!r}: {info.filename} is not in {looked}, and {problem}; put the file in "
        f"one of those folders or name its folder with --data-dir DIR or {ENV_VAR}"
    )


def load_dataset(name: str, data_dir=None, download: bool = True) -> Dataset:
    """Load one of :data:`DATASETS` (or an alias) as a :class:`Dataset`."""
    key = ALIASES.get(name, name)
    if key not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)} or pass --csv FILE")
    info = DATASETS[key]
    path = find_data_file(info, data_dir, download)
    table = np.loadtxt(path, dtype=str, delimiter=info.delimiter, ndmin=2)
    if table.shape[1] != len(info.columns):
        raise ValueError(f"{path}: expected {len(info.columns)} columns, found {table.shape[1]}")
    label = info.label_column % table.shape[1]
    features = [i for i in range(table.shape[1]) if i != label]
    X = table[:, features].astype(float) if info.ranges else table[:, features].astype(object)
    return Dataset(
        key,
        X,
        table[:, label].astype(object),
        tuple(info.columns[i] for i in features),
        info.columns[label],
        info.ranges,
    )
