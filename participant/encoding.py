"""Turning records into the integer inputs the frequency oracles randomise.

Categories become 0-based codes in the order the spec lists them. Feature value ``a`` of a feature
with ``k`` classes and class ``c`` become the joint input ``a·k + c`` (the paper's
``(a_i - 1)·k + v`` with 0-based indices), so one report keeps the link between feature and class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from .errors import RecordError
from .spec import CollectionSpec


def joint_encode(feature_codes, class_codes, n_classes: int) -> np.ndarray:
    """Joint inputs ``a·k + c``; same shape as the (broadcast) inputs, int64."""
    return np.asarray(feature_codes, dtype=np.int64) * n_classes + np.asarray(class_codes, dtype=np.int64)


def joint_decode(joint, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`joint_encode`: ``(feature_codes, class_codes)``."""
    return np.divmod(np.asarray(joint, dtype=np.int64), n_classes)


def encode_column(values, categories: Sequence[str], field: str) -> np.ndarray:
    """0-based codes of ``values`` (1-d) in ``categories``; raises :class:`RecordError` naming
    ``field`` and the first unknown value."""
    if not (isinstance(values, np.ndarray) and values.dtype.kind == "U"):  # an array of strings is as written
        values = np.asarray(values, dtype=object).astype(str)  # most of the cost: each value through Python
    cats = np.asarray(categories, dtype=str)
    order = np.argsort(cats)
    position = np.searchsorted(cats[order], values)
    position = np.minimum(position, len(cats) - 1)
    codes = order[position]
    unknown = cats[codes] != values
    if unknown.any():
        bad = str(values[np.argmax(unknown)])  # a str, so the message shows the value, not numpy's repr
        raise RecordError(field, f"unknown value {bad!r}; expected one of {list(categories)}")
    return codes.astype(np.int64)


def encode_labels(labels, spec: CollectionSpec) -> np.ndarray:
    """Class codes of ``labels`` (1-d), shape ``(m,)``."""
    # dtype=object keeps each label as written: numpy would make [1, 2.5] floats, and "1.0" no class.
    if isinstance(labels, np.ndarray) and labels.dtype.kind == "U":  # strings, already as written
        return encode_column(labels.reshape(-1), spec.classes, spec.label)
    return encode_column(np.asarray(labels, dtype=object).reshape(-1), spec.classes, spec.label)


def encode_features(X, spec: CollectionSpec) -> np.ndarray:
    """Category codes of a table of raw values, shape ``(m, n)`` with columns in spec order.

    For continuous features the codes are the equal-width bins of the prepared coordinates."""
    if spec.continuous is not None:
        prep = spec.continuous
        return prep.discretise(prep.transform(X))
    X = np.asarray(X, dtype=object)
    if X.ndim != 2 or X.shape[1] != len(spec.features):
        raise RecordError("features", f"expected a table with {len(spec.features)} columns, got shape {X.shape}")
    codes = np.empty(X.shape, dtype=np.int64)
    for i, feature in enumerate(spec.features):
        codes[:, i] = encode_column(X[:, i], feature.categories, feature.name)
    return codes


def feature_rows(X, spec: CollectionSpec) -> np.ndarray:
    """The raw feature table ``(m, n)`` (object dtype, columns in spec order) of what a
    scikit-learn user passes: a pandas DataFrame (its columns picked by the spec's feature names,
    extra columns such as the label ignored), a list of records as dicts, or rows already in spec
    order. A record's label, if it holds one, is ignored, as a DataFrame's label column is. Raises
    :class:`RecordError` naming a missing column or field."""
    names = list(raw_field_names(spec)[:-1])
    if hasattr(X, "columns"):  # a DataFrame, without importing pandas
        missing = [n for n in names if n not in X.columns]
        if missing:
            raise RecordError(missing[0], f"the table has no column {missing[0]!r} (the spec's features: {names})")
        return X[names].to_numpy(dtype=object)
    if isinstance(X, (list, tuple)) and X and isinstance(X[0], Mapping):
        return np.array([_raw_values(record, spec, with_label=False) for record in X], dtype=object)
    return np.asarray(X, dtype=object)


def raw_field_names(spec: CollectionSpec) -> tuple[str, ...]:
    """The fields a person's record holds: the raw features, then the label."""
    raw = spec.continuous.inputs if spec.continuous is not None else spec.features
    return (*(f.name for f in raw), spec.label)


def _raw_values(record: Mapping[str, object], spec: CollectionSpec, with_label: bool = True) -> list:
    """The record's raw feature values in spec order; raises :class:`RecordError` for a missing
    field (the label too, unless ``with_label`` is false: a record to classify need not hold it)
    or, for continuous features, a value that is not a number."""
    if not isinstance(record, Mapping):
        raise RecordError("record", "must be a mapping of field name to value")
    names = raw_field_names(spec)
    for name in names if with_label else names[:-1]:
        if name not in record or record[name] is None:
            raise RecordError(name, "missing")
    values = [record[name] for name in names[:-1]]
    if spec.continuous is not None:
        for name, value in zip(names, values):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise RecordError(name, f"must be a number, got {value!r}")
    return values


def encode_record(record: Mapping[str, object], spec: CollectionSpec) -> tuple[np.ndarray, np.ndarray]:
    """One person's record (a mapping holding every raw feature and the label) as a raw feature
    row ``(1, p)`` and a class code ``(1,)``; raises :class:`RecordError` naming a missing or bad field."""
    row = np.array([_raw_values(record, spec)], dtype=object)
    if spec.continuous is None:
        encode_features(row, spec)  # validates every category now, before anything is randomised
    return row, encode_labels([record[spec.label]], spec)


def _declared(value, codes: Mapping[str, int]) -> int | None:
    """The 0-based code of ``value`` (compared as written, ``str``, as :func:`encode_column` does)
    among a field's declared ``codes``, or None for a missing or undeclared value. A dict lookup,
    so its time does not follow where the value sits in the list."""
    return None if value is None else codes.get(str(value))


def _finite(value) -> bool:
    """Whether ``value`` is a finite real number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def record_input(record: Mapping[str, object], spec: CollectionSpec, i: int, rng) -> np.ndarray:
    """Input ``i``'s value for one person's ``record``, as a population of one (shape ``(1,)`` or
    ``(1, dim)``), ready for that input's mechanism.

    A field the spec does not declare a value for (a missing field, a category or class the spec
    leaves out, a continuous value that is not a finite number) takes a value drawn uniformly from
    the declared ones: a category, a class, or a number in the declared range. The report is then
    drawn from a mixture of what the declared values would give, so it is still ε-LDP for the
    person, and nothing the device does (whether it sends, what, when) tells the service that the
    record held something else. The substitutes are drawn whatever the record holds, in a fixed
    order (the class, then the reported feature's category, or every continuous input's value), so
    the draws made never depend on the record either. Raises :class:`RecordError` only when
    ``record`` is not a mapping (the app's mistake, not the person's data)."""
    if not isinstance(record, Mapping):
        raise RecordError("record", "must be a mapping of field name to value")
    k = spec.n_classes
    class_draw = int(rng.integers(0, k))
    label = _declared(record.get(spec.label), spec.class_codes)
    c = class_draw if label is None else label
    prep = spec.continuous
    if prep is None:
        if i == 0:
            return np.array([c], dtype=np.int64)
        feature = spec.features[i - 1]
        category_draw = int(rng.integers(0, len(feature.categories)))
        a = _declared(record.get(feature.name), spec.category_codes[i - 1])
        return np.array([(category_draw if a is None else a) * k + c], dtype=np.int64)
    raw = []
    for f in prep.inputs:
        drawn = f.low + float(rng.random()) * (f.high - f.low)
        value = record.get(f.name)
        raw.append(float(value) if _finite(value) else drawn)
    if spec.model == "gaussian":
        return population_inputs(spec, np.array([raw]), [spec.classes[c]])[i]
    if i == 0:
        return np.array([c], dtype=np.int64)
    code = int(prep.discretise(prep.transform([raw]))[0, i - 1])
    return np.array([code * k + c], dtype=np.int64)


def population_inputs(spec: CollectionSpec, X, y) -> list[np.ndarray]:
    """Every person's value for every input, as one array per input (first axis: people).

    Discrete model: the class code, then each feature's joint input ``a·k + c``. Gaussian model:
    the class code, then class-hiding vectors: each prepared coordinate ``z`` at the person's
    class position (and zeros elsewhere), and ``z²`` likewise, per the spec's approach.
    """
    labels = encode_labels(y, spec)
    if spec.model == "discrete":
        codes = encode_features(X, spec)
        joint = joint_encode(codes, labels[:, None], spec.n_classes)
        return [labels, *joint.T]
    Z = spec.continuous.transform(X)
    m, r = Z.shape
    hidden = np.zeros((m, r, spec.n_classes))
    hidden[np.arange(m), :, labels] = Z
    squares = hidden**2
    if spec.approach == 3:
        return [labels, *(v for i in range(r) for v in (hidden[:, i, :], squares[:, i, :]))]
    return [labels, hidden.reshape(m, -1), squares.reshape(m, -1)]


def input_values(feature_codes: np.ndarray, class_codes: np.ndarray, n_classes: int) -> np.ndarray:
    """Every person's ``n + 1`` inputs, shape ``(m, n + 1)``: column 0 the class code, column
    ``i + 1`` the joint input of feature ``i``."""
    class_codes = np.asarray(class_codes, dtype=np.int64)
    joint = joint_encode(feature_codes, class_codes[:, None], n_classes)
    return np.column_stack([class_codes, joint])
