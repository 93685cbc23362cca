"""A collection's published spec: what participants report and how they randomise it.

The operator creates it, the aggregator publishes it read-only, and every participant reads it
before building their one report. It serialises to plain JSON and msgpack types.

Privacy: each person sends exactly one report per collection, randomised by ``protocol`` with
``epsilon``, so a person spends ``epsilon`` in total (ε-LDP for the whole record: class label and
every feature). The report carries one of the ``n + 1`` inputs (the class label, or one feature
jointly encoded with the class label); which one it carries is chosen independently of the
person's data, so revealing it costs nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import msgpack

from protocols import DEFAULT_THETA, FREQUENCY_ORACLES, FrequencyOracle, make_oracle

from .errors import SpecError

INPUT_SELECTIONS = ("uniform", "assigned")
SPEC_VERSION = 1


def _check_names(values, what: str) -> tuple[str, ...]:
    if not isinstance(values, (list, tuple)) or not values:
        raise SpecError(f"{what} must be a non-empty list of strings")
    if not all(isinstance(v, str) and v for v in values):
        raise SpecError(f"{what} must hold non-empty strings, got {values!r}")
    if len(set(values)) != len(values):
        raise SpecError(f"{what} must not repeat a value, got {values!r}")
    return tuple(values)


@dataclass(frozen=True)
class Feature:
    """A categorical feature: its name and the ordered list of values it may take."""

    name: str
    categories: tuple[str, ...]

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"feature name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "categories", _check_names(self.categories, f"feature {self.name!r} categories"))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "categories": list(self.categories)}


@dataclass(frozen=True)
class CollectionSpec:
    """What a collection asks of its participants.

    ``features`` and ``classes`` define the record; ``protocol`` (DE, SUE, OUE, SHE or THE),
    ``epsilon`` (the whole per-person budget) and ``theta`` (THE's threshold) define the
    randomisation. ``input_selection`` is ``"uniform"`` (each person picks the input they report
    uniformly at random) or ``"assigned"`` (the operator assigns each person an input group, and
    the participant is told its index).
    """

    features: tuple[Feature, ...]
    classes: tuple[str, ...]
    protocol: str
    epsilon: float
    theta: float = DEFAULT_THETA
    label: str = "class"
    input_selection: str = "uniform"
    oracles: tuple[FrequencyOracle, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        features = tuple(f if isinstance(f, Feature) else Feature(**f) for f in self.features or ())
        if not features:
            raise SpecError("features must list at least one feature")
        names = [f.name for f in features]
        if len(set(names)) != len(names):
            raise SpecError(f"feature names must be unique, got {names!r}")
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "classes", _check_names(self.classes, "classes"))
        if len(self.classes) < 2:
            raise SpecError("classes must list at least two class labels")
        if not isinstance(self.label, str) or not self.label or self.label in names:
            raise SpecError(f"label must be a non-empty name distinct from the features, got {self.label!r}")
        if self.protocol not in FREQUENCY_ORACLES:
            raise SpecError(f"protocol must be one of {', '.join(FREQUENCY_ORACLES)}, got {self.protocol!r}")
        if (
            isinstance(self.epsilon, bool)
            or not isinstance(self.epsilon, (int, float))
            or not (math.isfinite(self.epsilon) and self.epsilon > 0)
        ):
            raise SpecError(f"epsilon must be a finite number > 0, got {self.epsilon!r}")
        if not isinstance(self.theta, (int, float)) or not 0 < self.theta < 1:
            raise SpecError(f"theta must lie in (0, 1), got {self.theta!r}")
        if self.input_selection not in INPUT_SELECTIONS:
            raise SpecError(f"input_selection must be one of {INPUT_SELECTIONS}, got {self.input_selection!r}")
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "theta", float(self.theta))
        oracles = tuple(make_oracle(self.protocol, self.epsilon, d, self.theta) for d in self.domain_sizes)
        object.__setattr__(self, "oracles", oracles)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def n_inputs(self) -> int:
        """``n + 1``: the class label, then each feature jointly encoded with the class."""
        return len(self.features) + 1

    @property
    def input_names(self) -> tuple[str, ...]:
        return (self.label, *(f.name for f in self.features))

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Domain size of each input: ``k`` for the class, ``n_i · k`` for feature ``i``."""
        k = len(self.classes)
        return (k, *(len(f.categories) * k for f in self.features))

    @property
    def epsilon_per_person(self) -> float:
        """The ε one person spends on this collection: one report, so exactly ``epsilon``."""
        return self.epsilon

    def privacy_statement(self) -> str:
        return (
            f"Each person sends one {self.protocol} report with epsilon={self.epsilon:g}: "
            f"epsilon={self.epsilon_per_person:g}-LDP per person for the whole record "
            f"({self.n_inputs} inputs, one reported)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SPEC_VERSION,
            "features": [f.to_dict() for f in self.features],
            "classes": list(self.classes),
            "label": self.label,
            "protocol": self.protocol,
            "epsilon": self.epsilon,
            "theta": self.theta,
            "input_selection": self.input_selection,
        }

    @classmethod
    def from_dict(cls, data: Any) -> CollectionSpec:
        """Parse and validate a spec dict; raises :class:`SpecError` naming what is wrong."""
        if not isinstance(data, dict):
            raise SpecError("a spec must be a mapping")
        data = dict(data)
        version = data.pop("version", SPEC_VERSION)
        if version != SPEC_VERSION:
            raise SpecError(f"unsupported spec version {version!r}; this library reads version {SPEC_VERSION}")
        known = {"features", "classes", "label", "protocol", "epsilon", "theta", "input_selection"}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        missing = {"features", "classes", "protocol", "epsilon"} - set(data)
        if missing:
            raise SpecError(f"missing spec fields: {', '.join(sorted(missing))}")
        features = data.pop("features")
        if not isinstance(features, (list, tuple)) or not all(isinstance(f, dict) for f in features):
            raise SpecError("features must be a list of {name, categories} mappings")
        try:
            feats = [Feature(f["name"], f["categories"]) for f in features]
        except KeyError as exc:
            raise SpecError(f"every feature needs a {exc.args[0]!r} field") from None
        return cls(features=feats, **data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> CollectionSpec:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise SpecError(f"spec is not valid JSON: {exc}") from None

    def to_msgpack(self) -> bytes:
        return msgpack.packb(self.to_dict())

    @classmethod
    def from_msgpack(cls, blob: bytes) -> CollectionSpec:
        try:
            return cls.from_dict(msgpack.unpackb(blob))
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"spec is not valid msgpack: {exc}") from None
