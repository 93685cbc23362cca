"""Preparing continuous values on the device, as a collection's spec prescribes (section 3.2).

1. Each raw feature is clipped to its declared range ``[low, high]`` and mapped linearly to
   [-1, 1]. The range is published by the collector beforehand, never computed from the people
   being surveyed. A value outside it is clipped (and counted), not refused.
2. Optionally a published projection ``z = W (x - c)`` reduces the dimension (PCA or DCA fitted by
   the operator on a reference sample); each projected coordinate is clipped to its own declared
   range and mapped to [-1, 1] again.
3. For a discrete model the prepared coordinates fall into ``bins`` equal-width bins over [-1, 1]
   (equal-width discretisation of the declared range), and the categorical pipeline takes over.

A projection fitted on the very people who are then surveyed leaks information about them
outside the LDP guarantee: fit it on a public or separately consented reference sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .errors import RecordError, SpecError

# More bins than this only spread one report per person thinner; it also bounds what a spec allocates.
MAX_BINS = 10_000


@dataclass(frozen=True)
class ContinuousFeature:
    """A continuous quantity with its declared range ``[low, high]``."""

    name: str
    low: float
    high: float

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"continuous feature name must be a non-empty string, got {self.name!r}")
        for bound in (self.low, self.high):
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
                raise SpecError(f"feature {self.name!r}: low and high must be finite numbers")
        if not self.low < self.high:
            raise SpecError(f"feature {self.name!r}: low must be below high, got [{self.low}, {self.high}]")
        object.__setattr__(self, "low", float(self.low))
        object.__setattr__(self, "high", float(self.high))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "low": self.low, "high": self.high}


def _ranges(features) -> tuple[np.ndarray, np.ndarray]:
    return np.array([f.low for f in features]), np.array([f.high for f in features])


def clip_and_normalise(X: np.ndarray, features, bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Clip each column to its declared range and map it linearly onto [-1, 1] (``bounds``: the
    ranges as arrays, when the caller holds them already)."""
    low, high = bounds if bounds is not None else _ranges(features)
    return 2.0 * (np.clip(X, low, high) - low) / (high - low) - 1.0


@dataclass(frozen=True)
class Projection:
    """``z = matrix @ (x - center)`` on normalised inputs; ``outputs`` declares each projected
    coordinate's name and range (in the units of ``z``)."""

    matrix: tuple[tuple[float, ...], ...]
    center: tuple[float, ...]
    outputs: tuple[ContinuousFeature, ...]
    method: str = "custom"

    def __post_init__(self):
        outputs = tuple(o if isinstance(o, ContinuousFeature) else ContinuousFeature(**o) for o in self.outputs)
        object.__setattr__(self, "outputs", outputs)
        try:
            matrix = np.asarray(self.matrix, dtype=float)
            center = np.asarray(self.center, dtype=float)
        except (TypeError, ValueError):
            raise SpecError("projection matrix and center must be numbers") from None
        if matrix.ndim != 2 or center.ndim != 1 or matrix.shape[1] != center.shape[0]:
            raise SpecError(f"projection matrix {matrix.shape} does not fit center {center.shape}")
        if matrix.shape[0] != len(outputs) or not np.isfinite(matrix).all() or not np.isfinite(center).all():
            raise SpecError("projection needs one declared output range per row and finite entries")
        object.__setattr__(self, "matrix", tuple(map(tuple, matrix.tolist())))
        object.__setattr__(self, "center", tuple(center.tolist()))

    @cached_property  # a device applies it to every record: the arrays once
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        return np.asarray(self.center), np.asarray(self.matrix).T, _ranges(self.outputs)

    def apply(self, X_normalised: np.ndarray) -> np.ndarray:
        center, matrix_t, _ = self._arrays
        return (X_normalised - center) @ matrix_t

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "matrix": [list(r) for r in self.matrix],
            "center": list(self.center),
            "outputs": [o.to_dict() for o in self.outputs],
        }


@dataclass(frozen=True)
class Preparation:
    """How a device turns its raw continuous record into the coordinates it reports on."""

    inputs: tuple[ContinuousFeature, ...]
    projection: Projection | None = None
    bins: int | None = None

    def __post_init__(self):
        inputs = tuple(f if isinstance(f, ContinuousFeature) else ContinuousFeature(**f) for f in self.inputs or ())
        if not inputs:
            raise SpecError("continuous inputs must list at least one feature")
        names = [f.name for f in inputs]
        if len(set(names)) != len(names):
            raise SpecError(f"continuous feature names must be unique, got {names}")
        object.__setattr__(self, "inputs", inputs)
        projection = self.projection
        if projection is not None and not isinstance(projection, (dict, Projection)):
            raise SpecError("projection must be a mapping with matrix, center and outputs")
        if isinstance(projection, dict):
            try:
                projection = Projection(**projection)
            except TypeError as exc:
                raise SpecError(f"invalid projection: {exc}") from None
            object.__setattr__(self, "projection", projection)
        if projection is not None and len(projection.center) != len(inputs):
            raise SpecError(f"projection expects {len(projection.center)} inputs, the spec declares {len(inputs)}")
        if self.bins is not None and (
            isinstance(self.bins, bool) or not isinstance(self.bins, int) or not 2 <= self.bins <= MAX_BINS
        ):
            raise SpecError(f"bins must be an integer from 2 to {MAX_BINS}, got {self.bins!r}")

    @property
    def outputs(self) -> tuple[ContinuousFeature, ...]:
        """The prepared coordinates: the projection's outputs, or the inputs themselves."""
        return self.projection.outputs if self.projection is not None else self.inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    def check(self, X) -> np.ndarray:
        """``X`` as a float array ``(m, p)``; raises :class:`RecordError` naming the feature for a
        wrong width, a non-number or NaN."""
        try:
            X = np.asarray(X, dtype=float)
        except (TypeError, ValueError):
            raise RecordError("features", "continuous values must be numbers") from None
        if X.ndim != 2 or X.shape[1] != len(self.inputs):
            raise RecordError(
                "features", f"expected {len(self.inputs)} continuous values per record, got shape {X.shape}"
            )
        bad = ~np.isfinite(X)
        if bad.any():
            raise RecordError(
                self.inputs[int(np.argmax(bad.any(axis=0)))].name, "must be a finite number, got NaN or inf"
            )
        return X

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return _ranges(self.inputs)

    def transform(self, X) -> np.ndarray:
        """Prepared coordinates in [-1, 1], shape ``(m, r)``."""
        Z = clip_and_normalise(self.check(X), self.inputs, self._bounds)
        if self.projection is not None:
            Z = clip_and_normalise(self.projection.apply(Z), self.projection.outputs, self.projection._arrays[2])
        return Z

    def bin_edges(self) -> np.ndarray:
        """The ``bins + 1`` equal-width edges over [-1, 1] of every prepared coordinate."""
        return np.linspace(-1.0, 1.0, self.bins + 1)

    def discretise(self, Z: np.ndarray) -> np.ndarray:
        """Bin index of each prepared coordinate, shape ``(m, r)``; the top edge falls in the last bin."""
        return np.minimum(((Z + 1.0) / 2.0 * self.bins).astype(np.int64), self.bins - 1)

    def bin_labels(self) -> list[str]:
        return [f"bin{b}" for b in range(self.bins)]

    def to_dict(self) -> dict[str, Any]:
        out = {"inputs": [f.to_dict() for f in self.inputs]}
        if self.projection is not None:
            out["projection"] = self.projection.to_dict()
        if self.bins is not None:
            out["bins"] = self.bins
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Preparation:
        if not isinstance(data, dict):
            raise SpecError("continuous must be a mapping with inputs, projection and bins")
        unknown = set(data) - {"inputs", "projection", "bins"}
        if unknown:
            raise SpecError(f"unknown continuous fields: {', '.join(sorted(unknown))}")
        inputs = data.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(f, dict) for f in inputs):
            raise SpecError("continuous inputs must be a list of {name, low, high}")
        try:
            features = [ContinuousFeature(**f) for f in inputs]
        except TypeError as exc:
            raise SpecError(f"invalid continuous feature: {exc}") from None
        return cls(features, data.get("projection"), data.get("bins"))
