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

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgpack

from protocols import DEFAULT_THETA, PAPER_THETA, PROTOCOL_NAMES, Mechanism, make_oracle, optimal_theta
from protocols.mean import LaplaceMean, OneBitMean

from .continuous import Preparation
from .errors import SpecError
from .shuffled import Shuffle

INPUT_SELECTIONS = ("uniform", "assigned")
MODELS = ("discrete", "gaussian")
BUDGETS = ("one-report", "per-input", "split")
APPROACHES = (1, 2, 3)
SPEC_VERSION = 1
# Where every formula (probabilities, variances, grid noise, exact samplers) is sound and useful:
# below, an estimate is noise at any population; above, the randomisation barely changes anything.
EPSILON_RANGE = (1e-3, 50.0)


def _number(value) -> float | None:
    """``value`` as a finite float, or None if it is not a real number (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
    ``epsilon`` (the whole per-person budget) and ``theta`` (THE's threshold, applied by the
    aggregator; omitted, the variance-optimal one for the ε, stated in the spec) define the
    randomisation. ``input_selection`` is ``"uniform"`` (each person picks the input they report
    uniformly at random) or ``"assigned"`` (the operator assigns each person an input group, and
    the participant is told its index).

    ``budget`` says what each person sends and so spends: ``"one-report"`` (default: one input,
    ε per person), ``"per-input"`` (every input, each at ε: ``n_inputs·ε`` per person, which is
    what the paper's discrete figures appear to measure) or ``"split"`` (every input at
    ``ε / n_inputs``: ε per person by sequential composition).

    ``class_share`` (one report per person, inputs chosen at random): the probability that a
    person reports the class input, the features sharing the rest evenly; left out, every input
    is equally likely. More reports on the class estimate an uneven class prior better, at the
    features' expense (documentation, *Who reports the class*). The choice never looks at the person's
    data, so the share changes neither what a report reveals nor what it spends.

    ``shuffle`` (:class:`~participant.shuffled.Shuffle`): the collection is collected through a
    shuffler, which releases reports to the aggregator only in batches of at least its
    ``min_batch``; the person then also has (ε, δ) against the aggregator alone (the privacy
    statement names both). The report, and what it spends, are unchanged.

    Continuous records: ``continuous`` (a :class:`~participant.continuous.Preparation`) declares
    the raw features' ranges, an optional projection and, for ``model="discrete"``, the number of
    equal-width bins; the categorical ``features`` are then derived (one per prepared coordinate,
    categories ``bin0 …``). ``model="gaussian"`` estimates per-class means and variances instead,
    with the multi-dimensional ``approach`` 1, 2 or 3 of section 2.2.3 (see :attr:`oracles`).
    """

    features: tuple[Feature, ...]
    classes: tuple[str, ...]
    protocol: str
    epsilon: float
    theta: float | None = DEFAULT_THETA
    label: str = "class"
    input_selection: str = "uniform"
    continuous: Preparation | None = None
    model: str = "discrete"
    approach: int = 3
    budget: str = "one-report"
    class_share: float | None = None
    shuffle: Shuffle | None = None
    oracles: tuple[Mechanism, ...] = field(init=False, repr=False, compare=False)
    input_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.model not in MODELS:
            raise SpecError(f"model must be one of {MODELS}, got {self.model!r}")
        continuous = self.continuous
        if continuous is not None and not isinstance(continuous, (dict, Preparation)):
            raise SpecError("continuous must be a mapping of ranges (and optionally projection and bins)")
        if isinstance(continuous, dict):
            continuous = Preparation.from_dict(continuous)
            object.__setattr__(self, "continuous", continuous)
        features = tuple(f if isinstance(f, Feature) else Feature(**f) for f in self.features or ())
        if continuous is not None and self.model == "discrete":
            if continuous.bins is None:
                raise SpecError("a discrete model of continuous features needs bins (equal-width bins per coordinate)")
            derived = tuple(Feature(name, continuous.bin_labels()) for name in continuous.output_names)
            if features and features != derived:
                raise SpecError("features are derived from the continuous preparation; leave them out")
            features = derived
        # Checked whatever the model, as participant-js checks it: a field one device ignores and
        # another refuses would tell the two apart.
        if isinstance(self.approach, bool) or self.approach not in APPROACHES:
            raise SpecError(f"approach must be one of {APPROACHES}, got {self.approach!r}")
        if self.model == "gaussian":
            if continuous is None:
                raise SpecError("a gaussian model needs continuous features (the 'continuous' field)")
            if features:
                raise SpecError("a gaussian model takes continuous features only; leave 'features' out")
        elif not features:
            raise SpecError("features must list at least one feature")
        names = [f.name for f in features] or list(continuous.output_names)
        if len(set(names)) != len(names):
            raise SpecError(f"feature names must be unique, got {names!r}")
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "classes", _check_names(self.classes, "classes"))
        if len(self.classes) < 2:
            raise SpecError("classes must list at least two class labels")
        if not isinstance(self.label, str) or not self.label or self.label in names:
            raise SpecError(f"label must be a non-empty name distinct from the features, got {self.label!r}")
        if self.protocol not in PROTOCOL_NAMES:
            raise SpecError(f"protocol must be one of {', '.join(PROTOCOL_NAMES)}, got {self.protocol!r}")
        low, high = EPSILON_RANGE
        epsilon = _number(self.epsilon)
        if epsilon is None or not low <= epsilon <= high:
            raise SpecError(f"epsilon must be a number from {low:g} to {high:g}, got {_short(self.epsilon)}")
        theta = _number(self.theta)
        if self.theta is not None and (theta is None or not 0 < theta < 1):
            raise SpecError(f"theta must lie in (0, 1), got {_short(self.theta)}")
        if self.budget not in BUDGETS:
            raise SpecError(f"budget must be one of {BUDGETS}, got {self.budget!r}")
        if self.input_selection not in INPUT_SELECTIONS:
            raise SpecError(f"input_selection must be one of {INPUT_SELECTIONS}, got {self.input_selection!r}")
        if self.class_share is not None:
            share = _number(self.class_share)
            if share is None or not 0 < share < 1:
                raise SpecError(f"class_share must lie in (0, 1), got {_short(self.class_share)}")
            if self.budget != "one-report" or self.input_selection != "uniform":
                raise SpecError(
                    "class_share goes with one report per person and inputs chosen at random "
                    "(budget one-report, input_selection uniform)"
                )
            object.__setattr__(self, "class_share", share)
        if self.shuffle is not None:
            object.__setattr__(self, "shuffle", Shuffle.from_dict(self.shuffle))
            if self.budget != "one-report":
                raise SpecError("a shuffled collection takes one report per person (budget one-report)")
            if self.input_selection != "uniform":
                # An assigned input tells the aggregator which device reports which input, so a
                # report would hide only among its batch's reports of that input: not the batch
                # the accountant counts.
                raise SpecError(
                    "a shuffled collection's devices choose their input at random (input_selection uniform): "
                    "an assigned input hides a report only among the batch's reports of the same input"
                )
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "theta", theta)
        k = len(self.classes)
        if self.model == "discrete":
            count = len(features) + 1
        else:
            count = 2 * len(continuous.output_names) + 1 if self.approach == 3 else 3
        eps = self.epsilon / count if self.budget == "split" else self.epsilon
        if eps < low:
            raise SpecError(
                f"split among {count} inputs, epsilon {self.epsilon:g} leaves {eps:.3g} per input, below {low:g}"
            )
        if theta is None:  # THE's variance-optimal threshold at the inputs' ε; the field is moot for the others
            theta = optimal_theta(eps) if self.protocol == "THE" else PAPER_THETA
            object.__setattr__(self, "theta", theta)
        class_oracle = make_oracle(self.protocol, eps, k, self.theta)
        if self.model == "discrete":
            oracles = (
                class_oracle,
                *(make_oracle(self.protocol, eps, len(f.categories) * k, self.theta) for f in features),
            )
            input_names = (self.label, *names)
        else:
            oracles, input_names = self._gaussian_inputs(class_oracle, continuous.output_names, eps)
        object.__setattr__(self, "oracles", oracles)
        object.__setattr__(self, "input_names", input_names)

    def _gaussian_inputs(self, class_oracle, names, eps: float) -> tuple[tuple[Mechanism, ...], tuple[str, ...]]:
        """Inputs of a Gaussian collection. Reports are class-hiding vectors: length ``k``, the
        value (or its square) at the person's class, zeros elsewhere, every entry in [-1, 1].

        - Approach 3: one input per (coordinate, value or square); Laplace with sensitivity 2.
        - Approach 1: one input with all ``r`` coordinates' vectors (``r·k`` entries) and one with
          their squares; Laplace with sensitivity ``2r`` (noise scaled to the dimension count).
        - Approach 2: the same two inputs through the one-bit mechanism over the ``r·k`` entries
          (a zero entry gives an unbiased coin, so the class stays hidden).
        Plus the class input. Every person reports exactly one input, with the whole ε.
        """
        k, r = len(self.classes), len(names)
        if self.approach == 3:
            oracles = [class_oracle]
            input_names = [self.label]
            for name in names:
                oracles += [LaplaceMean(eps, k, 2.0), LaplaceMean(eps, k, 2.0)]
                input_names += [f"{name}:value", f"{name}:square"]
            return tuple(oracles), tuple(input_names)
        if self.approach == 1:
            pair = (LaplaceMean(eps, r * k, 2.0 * r), LaplaceMean(eps, r * k, 2.0 * r))
        else:
            pair = (OneBitMean(eps, r * k), OneBitMean(eps, r * k))
        return (class_oracle, *pair), (self.label, "values", "squares")

    @cached_property
    def class_codes(self) -> dict[str, int]:
        """Each class label's 0-based code."""
        return {c: j for j, c in enumerate(self.classes)}

    @cached_property
    def category_codes(self) -> tuple[dict[str, int], ...]:
        """Each feature's categories with their 0-based codes, in feature order."""
        return tuple({v: j for j, v in enumerate(f.categories)} for f in self.features)

    def check_expected(self, expected: Mapping[str, Sequence[str]]) -> None:
        """Raise :class:`SpecError` unless every field ``expected`` names is a categorical feature
        or the label of this spec, declaring at least the values listed (the values an app knows
        its people hold; a spec leaving one out is refused before any record is read)."""
        if not isinstance(expected, Mapping):
            raise TypeError("expected must map field names to the values the app knows they take")
        declared = {f.name: f.categories for f in self.features} | {self.label: self.classes}
        for name, values in expected.items():
            if isinstance(values, str) or not isinstance(values, (list, tuple, set, frozenset)):
                raise TypeError(f"expected[{name!r}] must be a list of values, got {values!r}")
            if name not in declared or (self.continuous is not None and name != self.label):
                raise SpecError(f"the spec has no categorical field {name!r}, which this app expects; refusing to report")
            missing = [str(v) for v in values if str(v) not in declared[name]]
            if missing:
                raise SpecError(
                    f"the spec's {name!r} leaves out {_short(missing)}, which this app expects; refusing to report"
                )

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def n_inputs(self) -> int:
        """How many inputs a person may report one of: ``n + 1`` for a discrete model (the class
        label, then each feature jointly encoded with the class)."""
        return len(self.oracles)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Domain size of each input of a discrete model: ``k`` for the class, ``n_i · k`` for feature ``i``."""
        return tuple(o.state_size for o in self.oracles)

    @property
    def protocols(self) -> dict[str, str]:
        """Each input's mechanism by input name, as the spec resolves it (``auto``: DE or OUE per
        input, whichever has the smaller variance)."""
        return {name: oracle.name for name, oracle in zip(self.input_names, self.oracles)}

    def _protocols_named(self) -> str:
        """The protocol the reports use, as the spec resolved it: one name (``auto`` resolved to
        the one every input got), or each protocol with the inputs it serves."""
        if self.model != "discrete" or self.protocol != "auto":
            return self.protocol
        by_protocol: dict[str, list[str]] = {}
        for name, protocol in self.protocols.items():
            by_protocol.setdefault(protocol, []).append(name)
        if len(by_protocol) == 1:
            return next(iter(by_protocol))
        return "; ".join(f"{protocol} for {', '.join(names)}" for protocol, names in by_protocol.items())

    @property
    def reports_per_person(self) -> int:
        return 1 if self.budget == "one-report" else self.n_inputs

    @property
    def epsilon_per_input(self) -> float:
        """The ε of each report."""
        return self.oracles[0].epsilon

    @property
    def epsilon_per_person(self) -> float:
        """The ε one person spends on this collection, by sequential composition over their reports."""
        return self.reports_per_person * self.epsilon_per_input

    def privacy_statement(self, central_epsilon: float | None = None, flooded_epsilon: float | None = None) -> str:
        """What a person spends, in words. For a shuffled collection, also what the aggregator
        alone may learn, from the shuffle accountant (``protocols.shuffling.guarantees``, which
        the service computes): ``central_epsilon`` when the other reports of a person's batch are
        people's (its ``min_batch − 1`` others and the shuffler's dummies), ``flooded_epsilon``
        when the aggregator wrote every other report but the dummies; left out, the statement
        names how each is computed."""
        named = self._protocols_named()
        one, many = (f"one {named} report", f"{self.n_inputs} {named} reports") if " " not in named else (
            f"one report ({named})", f"{self.n_inputs} reports ({named})"
        )  # fmt: skip
        how = one
        if self.model == "gaussian":
            mechanism = self.oracles[1]
            detail = f"scale {mechanism.scale:g}" if isinstance(mechanism, LaplaceMean) else "one bit"
            how = f"one report (class by {self.protocol}, values by {mechanism.name}, {detail})"
        if self.budget != "one-report":
            return (
                f"Each person sends {many}, one per input, each with "
                f"epsilon={self.epsilon_per_input:g}: epsilon={self.epsilon_per_person:g}-LDP per person "
                f"for the whole record (budget {self.budget})."
            )
        local = (
            f"Each person sends {how} with epsilon={self.epsilon:g}: "
            f"epsilon={self.epsilon_per_person:g}-LDP per person for the whole record "
            f"({self.n_inputs} inputs, one reported)."
        )
        if self.shuffle is None:
            return local
        k, m, delta = self.shuffle.min_batch, self.shuffle.dummies, self.shuffle.delta
        people = (
            f"epsilon={central_epsilon:.3g}" if central_epsilon is not None
            else f"the shuffle bound of epsilon={self.epsilon:g} over {k + m} reports"
        )
        others = f"at least {k - 1} other people's reports"
        if m:
            others += f" and the shuffler's {m} dummies"
        unamplified = m == 0 or (flooded_epsilon is not None and flooded_epsilon >= self.epsilon * (1 - 1e-4))
        if unamplified:
            why = "the shuffler adds no dummies" if m == 0 else f"{m} dummies are too few at this epsilon"
            flooded = (
                f"no amplification (epsilon={self.epsilon:g}) when the aggregator sends the shuffler every other report "
                f"of a person's batch ({why})"
            )
        else:
            bound = (
                f"epsilon={flooded_epsilon:.3g}" if flooded_epsilon is not None
                else f"the shuffle bound of epsilon={self.epsilon:g} over {m + 1} reports"
            )
            flooded = (
                f"({bound}, delta={delta:g})-DP whatever the aggregator sends the shuffler (a person's report among the "
                f"shuffler's {m} dummies alone)"
            )
        return (
            f"{local[:-1]}, against the aggregator and the shuffler together. Against the aggregator alone, if the "
            f"shuffler does not collude with it: ({people}, delta={delta:g})-DP when a person's batch holds {others}; "
            f"{flooded} (Feldman, McMillan and Talwar's bound)."
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "version": SPEC_VERSION,
            "features": [f.to_dict() for f in self.features],
            "classes": list(self.classes),
            "label": self.label,
            "protocol": self.protocol,
            "epsilon": self.epsilon,
            "theta": self.theta,
            "input_selection": self.input_selection,
        }
        if self.budget != "one-report":
            out["budget"] = self.budget
        if self.class_share is not None:
            out["class_share"] = self.class_share
        if self.shuffle is not None:
            out["shuffle"] = self.shuffle.to_dict()
        if self.continuous is not None:
            del out["features"]  # derived from the preparation
            out["continuous"] = self.continuous.to_dict()
            out["model"] = self.model
            if self.model == "gaussian":
                out["approach"] = self.approach
        return out

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
        known |= {"continuous", "model", "approach", "budget", "class_share", "shuffle"}
        unknown = set(data) - known
        if unknown:
            raise SpecError(f"unknown spec fields: {', '.join(sorted(unknown))}")
        required = {"classes", "protocol", "epsilon"} | ({"features"} if "continuous" not in data else set())
        missing = required - set(data)
        if missing:
            raise SpecError(f"missing spec fields: {', '.join(sorted(missing))}")
        features = data.pop("features", [])
        if not isinstance(features, (list, tuple)) or not all(isinstance(f, dict) for f in features):
            raise SpecError("features must be a list of {name, categories} mappings")
        try:
            feats = [Feature(f["name"], f["categories"]) for f in features]
        except KeyError as exc:
            raise SpecError(f"every feature needs a {exc.args[0]!r} field") from None
        return cls(features=feats, **data)

    @classmethod
    def published(cls, data: Any) -> CollectionSpec:
        """A spec as a service publishes it, read as a device reads it (and as
        ``participant-js`` does): :meth:`from_dict`, but every field a service resolves stated.
        THE's ``theta`` is one: a device that filled in its own default would answer a spec
        another device refuses, so the spec could tell the two apart. Raises :class:`SpecError`."""
        if isinstance(data, dict) and data.get("protocol") == "THE" and data.get("theta") is None:
            raise SpecError("a THE spec must state theta (the service publishes it)")
        return cls.from_dict(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @cached_property  # specs are immutable; the service compares it with every report it receives
    def fingerprint_digest(self) -> bytes:
        """SHA-256 (32 bytes) of the spec's canonical JSON: equal specs, equal digests; any change
        (a reordered category, another ε, another preparation) gives another."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).digest()

    @cached_property
    def question(self) -> str:
        """The hex SHA-256 of what decides a report's distribution given a record: the canonical
        spec without θ (applied by the aggregator, never by the device) and with THE named SHE
        (the two draw alike). Two specs with one question get identically distributed reports
        for every record, so a device answers them with one memoised answer. A shuffled spec's
        ``shuffle`` block stays in: an answer sent through a shuffler is never one also sent
        directly, or through another shuffler, where the aggregator could tell whose it is."""
        device_side = self.to_dict()
        device_side.pop("theta", None)
        if device_side["protocol"] == "THE":
            device_side["protocol"] = "SHE"
        canonical = json.dumps(device_side, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def fingerprint(self) -> str:
        """:attr:`fingerprint_digest` in hex, as the service publishes it."""
        return self.fingerprint_digest.hex()

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
