"""Building reports: choose the one input each person reports, and randomise it.

The same vectorised functions serve one person (the :class:`Participant`) and a simulated
population of thousands, so the simulator exercises exactly the code an app runs.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .encoding import _declared, _finite, raw_field_names, record_input
from .errors import RecordError, UnknownFields, UnknownValues
from .randomness import SecureGenerator
from .spec import CollectionSpec


def choose_inputs(spec: CollectionSpec, m: int, rng, class_share: float | None = None) -> np.ndarray:
    """For each of ``m`` people, the index of the one input they report, independent of their
    data; shape ``(m,)``. With a class share (``class_share``, else the spec's), the class input
    (index 0) with that probability and the others evenly; without one, uniform over the
    ``n + 1`` inputs.

    A collection that expects uneven classes states a ``class_share`` above ``1/(n + 1)`` in its
    spec (or an operator draws an ``"assigned"`` collection's groups with it): the class prior is
    then estimated from more reports, at the features' expense (documentation, *Estimators*, measured by
    ``bench/class_share.py``). No draw looks at anyone's data, so no share changes what a report
    reveals."""
    class_share = spec.class_share if class_share is None else class_share
    if class_share is None:
        return np.asarray(rng.integers(0, spec.n_inputs, size=m), dtype=np.int64)
    if not 0 < class_share < 1:
        raise ValueError(f"class_share must lie in (0, 1), got {class_share!r}")
    features = rng.integers(1, spec.n_inputs, size=m)
    return np.where(rng.random(m) < class_share, 0, features).astype(np.int64)


def input_probabilities(spec: CollectionSpec) -> np.ndarray:
    """The probability that a person reports each input under :func:`choose_inputs`, shape
    ``(n + 1,)``: the spec's class share for the class input and the rest evenly, or uniform."""
    n = spec.n_inputs
    if spec.class_share is None:
        return np.full(n, 1.0 / n)
    return np.concatenate([[spec.class_share], np.full(n - 1, (1.0 - spec.class_share) / (n - 1))])


@dataclass
class PerturbedInputs:
    """Reports of a population, grouped by the input they carry.

    ``people[i]`` holds the row numbers (into the population) of those who reported input ``i``
    and ``reports[i]`` their reports, in the same order.
    """

    people: list[np.ndarray]
    reports: list[np.ndarray]


def perturb_population(spec: CollectionSpec, inputs, chosen: np.ndarray, rng) -> PerturbedInputs:
    """Randomise, for every person, the input ``chosen`` for them.

    ``inputs`` holds one array per input (first axis: people), from
    :func:`participant.encoding.population_inputs`; a 2-d integer matrix ``(m, n + 1)`` from
    :func:`participant.encoding.input_values` works too. Each person's report is drawn by that
    input's mechanism at the spec's ε on their chosen input alone.
    """
    if isinstance(inputs, np.ndarray):
        inputs = list(inputs.T)
    people, reports = [], []
    for i, oracle in enumerate(spec.oracles):
        rows = np.flatnonzero(chosen == i)
        people.append(rows)
        reports.append(oracle.perturb(inputs[i][rows], rng))
    return PerturbedInputs(people, reports)


@dataclass(frozen=True)
class Report:
    """One person's report: which input it carries and its randomised payload.

    ``payload`` is one row of the protocol's reports (an int for DE, a bit vector for SUE/OUE, a
    float vector for SHE/THE). ``report_id`` is 16 random bytes that make retries idempotent.
    """

    input: int
    payload: np.ndarray
    report_id: bytes = field(default_factory=lambda: secrets.token_bytes(16))


class Participant:
    """One person's side of a collection.

    ``rng`` defaults to :class:`SecureGenerator` (the OS CSPRNG); pass a seeded numpy
    ``Generator`` only in simulations.

    ``strict=True`` refuses (:class:`~participant.errors.RecordError`, before anything is drawn) a
    record that holds a key the spec does not know, lacks one of its fields, or holds a value it
    does not declare (a category or class outside its list, a continuous value that is not a finite
    number); by default such a record is reported, an unknown key warned of
    (:class:`~participant.errors.UnknownFields`), a value differing from a declared one only in
    case too (:class:`~participant.errors.UnknownValues`, "did you mean 'Young'?"), and an
    undeclared value replaced by one drawn uniformly from the declared ones. The refusal depends
    only on the record's keys and values against the spec, and comes before any draw: it is seen by
    the app, never by the service, to which nothing is sent. A person whose record is refused does
    not report at all, though, and a missing report is the one thing a service could notice: strict
    suits an app's development and records the app itself builds, where an undeclared value is the
    app's bug, not the person's answer.
    """

    def __init__(self, spec: CollectionSpec, rng=None, strict: bool = False):
        self.spec = spec
        self.rng = SecureGenerator() if rng is None else rng
        self.strict = bool(strict)

    def _chosen(self, group) -> int | None:
        """The assigned input ``group`` checked against the spec (None when inputs are chosen at
        random); raises :class:`RecordError`."""
        if self.spec.input_selection == "assigned":
            if group is None or isinstance(group, bool) or not isinstance(group, (int, np.integer)):
                raise RecordError("group", "this collection assigns inputs: pass the group index you were given")
            if not 0 <= group < self.spec.n_inputs:
                raise RecordError("group", f"must lie in [0, {self.spec.n_inputs - 1}], got {group}")
            return int(group)
        if group is not None:
            raise RecordError("group", "this collection picks the input at random; do not pass a group")
        return None

    def validate(self, record: Mapping[str, object], group: int | None = None) -> None:
        """Raise :class:`~participant.errors.RecordError` when :meth:`report` would refuse
        ``group`` or a ``record`` that is not a mapping; draws nothing. Unless :attr:`strict`, what
        the record holds is never refused (see :func:`~participant.encoding.record_input`); keys the
        spec does not know are warned of (:class:`~participant.errors.UnknownFields`), and values
        differing from declared ones only in case (:class:`~participant.errors.UnknownValues`), on
        the device only. With :attr:`strict` either, a missing field or an undeclared value is
        refused (:class:`~participant.errors.RecordError` naming the field), nothing drawn."""
        self._one_report()
        self._chosen(group)
        if not isinstance(record, Mapping):
            raise RecordError("record", "must be a mapping of field name to value")
        self._check_record(record)

    def _check_record(self, record: Mapping[str, object]) -> None:
        """Warn of (or, :attr:`strict`, refuse) unknown keys and undeclared values; draws nothing."""
        fields = raw_field_names(self.spec)
        known = set(fields)  # a wide spec's record holds tens of thousands of keys: no scan per key
        unknown = [str(key) for key in record if key not in known]
        if unknown and self.strict:
            raise RecordError(
                unknown[0], f"not a field of this spec (its fields: {_listed(fields)}); strict: nothing drawn or sent"
            )
        if unknown:  # the app developer's to hear; what is drawn and sent does not change
            warnings.warn(
                UnknownFields(
                    f"the record holds {_listed(unknown)}, which this spec does not know (its fields: {_listed(fields)}): "
                    "not reported; a field meant instead is reported as a value drawn uniformly from its declared ones"
                ),
                stacklevel=4,
            )
        for name, value, declared in self._undeclared(record):
            if isinstance(value, str):
                # A lookup by folded case for the one field at fault: no scan of a wide spec.
                meant = {c.casefold(): c for c in declared}.get(value.casefold())
            else:
                meant = None
            hint = f"did you mean {meant!r}? " if meant is not None else ""
            if self.strict:
                what = "missing" if name not in record or value is None else f"{value!r} is not declared"
                choices = f"one of {_listed(declared)}" if declared else "a finite number"
                raise RecordError(name, f"{what}: {hint}expected {choices}; strict: nothing drawn or sent")
            if meant is not None:
                warnings.warn(
                    UnknownValues(
                        f"the record's {name!r} is {value!r}, which this spec does not declare: {hint}reported as a "
                        "value drawn uniformly from the declared ones"
                    ),
                    stacklevel=4,
                )

    def _undeclared(self, record: Mapping[str, object]):
        """``(field, value, declared values)`` of each field whose value ``record`` lacks or the
        spec does not declare (declared values empty for a continuous field: any finite number)."""
        spec = self.spec
        fields = [(spec.label, spec.class_codes, spec.classes)]
        if spec.continuous is None:
            fields += [(f.name, codes, f.categories) for f, codes in zip(spec.features, spec.category_codes)]
        for name, codes, declared in fields:
            value = record.get(name)
            if _declared(value, codes) is None:
                yield name, value, declared
        for f in spec.continuous.inputs if spec.continuous is not None else ():
            value = record.get(f.name)
            if not _finite(value):
                yield f.name, value, ()

    def _one_report(self) -> None:
        if self.spec.budget != "one-report":
            raise RecordError("budget", f"this collection's budget is {self.spec.budget!r}: use reports()")

    def report(self, record: Mapping[str, object], group: int | None = None) -> Report:
        """The one report for ``record`` (a mapping of the raw feature names and the label to values).

        ``group`` is the input index the operator assigned, required when the spec's
        ``input_selection`` is ``"assigned"`` and refused otherwise (:class:`RecordError`, nothing
        randomised). The input is chosen first, from the randomness alone; a value the spec does
        not declare is then reported as one drawn uniformly from the declared ones
        (:func:`~participant.encoding.record_input`), so every record gets a report. Only the input
        reported is randomised (one mechanism call).
        """
        self.validate(record, group)
        return self.draw(record, group)

    def draw(self, record: Mapping[str, object], group: int | None = None) -> Report:
        """:meth:`report` for a ``record`` and ``group`` that :meth:`validate` passed (the client
        validates before it touches the ledger, then draws: one warning, not two)."""
        chosen = self._chosen(group)
        i = int(choose_inputs(self.spec, 1, self.rng)[0]) if chosen is None else chosen
        value = record_input(record, self.spec, i, self.rng)
        return Report(input=i, payload=self.spec.oracles[i].perturb(value, self.rng)[0])

    def reports(self, record: Mapping[str, object]) -> list[Report]:
        """One report per input, for collections whose budget is ``per-input`` or ``split``
        (the person spends ``spec.epsilon_per_person``); undeclared values as in :meth:`report`."""
        if self.spec.budget == "one-report":
            raise RecordError("budget", "this collection takes one report per person: use report()")
        if not isinstance(record, Mapping):
            raise RecordError("record", "must be a mapping of field name to value")
        if self.strict:
            self._check_record(record)
        return [
            Report(i, oracle.perturb(record_input(record, self.spec, i, self.rng), self.rng)[0])
            for i, oracle in enumerate(self.spec.oracles)
        ]


def _listed(names, most: int = 12) -> str:
    """``names`` quoted and comma-separated, the first ``most`` of them."""
    shown = ", ".join(repr(n) for n in list(names)[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
