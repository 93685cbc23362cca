"""Turning records into the integer inputs the frequency oracles randomise.

Categories become 0-based codes in the order the spec lists them. Feature value ``a`` of a feature
with ``k`` classes and class ``c`` become the joint input ``a·k + c`` (the paper's
``(a_i - 1)·k + v`` with 0-based indices), so one report keeps the link between feature and class.
"""

from __future__ import annotations

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
    values = np.asarray(values, dtype=object).astype(str)
    cats = np.asarray(categories, dtype=str)
    order = np.argsort(cats)
    position = np.searchsorted(cats[order], values)
    position = np.minimum(position, len(cats) - 1)
    codes = order[position]
    unknown = cats[codes] != values
    if unknown.any():
        bad = values[np.argmax(unknown)]
        raise RecordError(field, f"unknown value {bad!r}; expected one of {list(categories)}")
    return codes.astype(np.int64)


def encode_labels(labels, spec: CollectionSpec) -> np.ndarray:
    """Class codes of ``labels`` (1-d), shape ``(m,)``."""
    return encode_column(np.asarray(labels).reshape(-1), spec.classes, spec.label)


def encode_features(X, spec: CollectionSpec) -> np.ndarray:
    """Category codes of a table of raw values, shape ``(m, n)`` with columns in spec order."""
    X = np.asarray(X, dtype=object)
    if X.ndim != 2 or X.shape[1] != len(spec.features):
        raise RecordError("features", f"expected a table with {len(spec.features)} columns, got shape {X.shape}")
    codes = np.empty(X.shape, dtype=np.int64)
    for i, feature in enumerate(spec.features):
        codes[:, i] = encode_column(X[:, i], feature.categories, feature.name)
    return codes


def encode_record(record: Mapping[str, object], spec: CollectionSpec) -> tuple[np.ndarray, int]:
    """One person's record (a mapping holding every feature and the label) as
    ``(feature codes (n,), class code)``; raises :class:`RecordError` naming a missing or bad field."""
    if not isinstance(record, Mapping):
        raise RecordError("record", "must be a mapping of field name to value")
    for name in spec.input_names:
        if name not in record or record[name] is None:
            raise RecordError(name, "missing")
    row = np.array([[record[f.name] for f in spec.features]], dtype=object)
    return encode_features(row, spec)[0], int(encode_labels([record[spec.label]], spec)[0])


def input_values(feature_codes: np.ndarray, class_codes: np.ndarray, n_classes: int) -> np.ndarray:
    """Every person's ``n + 1`` inputs, shape ``(m, n + 1)``: column 0 the class code, column
    ``i + 1`` the joint input of feature ``i``."""
    class_codes = np.asarray(class_codes, dtype=np.int64)
    joint = joint_encode(feature_codes, class_codes[:, None], n_classes)
    return np.column_stack([class_codes, joint])
