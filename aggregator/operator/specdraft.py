"""``python -m aggregator spec``: draft a collection spec from a public sample of the data.

The sample gives the categories of each categorical column and the class labels; numeric columns
take the ranges the operator declares. The draft is the spec the service accepts (``create
--spec``) and the simulator runs (``python -m sim --spec``); what the sample could not decide is
printed, for the operator to settle before publishing. In Python, :func:`draft_spec` drafts the
same spec from a pandas DataFrame, what the sample could not decide given as :class:`DraftNote`
warnings.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np

from participant.continuous import ContinuousFeature, Preparation
from participant.spec import CollectionSpec, Feature

from .csvdata import Table, read_frame

# A sample's most common class at this share or more gets the note on who reports the class.
UNEVEN = 0.6


class DraftNote(UserWarning):
    """What a sample could not decide about a drafted spec (:func:`draft_spec`): settle it before publishing."""


def draft_spec(
    frame,
    label,
    *,
    ranges=None,
    protocol: str = "auto",
    epsilon: float = 1.0,
    model: str = "discrete",
    bins: int = 4,
    approach: int = 3,
    budget: str = "one-report",
    class_share: float | None = None,
    people: int | None = None,
    drop=(),
) -> CollectionSpec:
    """The collection spec for a public sample held in a pandas DataFrame, as ``python -m
    aggregator spec --csv`` drafts it from a file (the same code): the class labels of column
    ``label``; each categorical column's categories (strings, booleans, pandas categories,
    integers with few values); numeric columns (floats, integers of many values) with their
    declared ``ranges`` (a mapping of column or pattern to ``(low, high)``), binned into ``bins``
    (``model="discrete"``) or Gaussian (``model="gaussian"``). ``ranges="data"`` takes the sample's
    extremes, warned. Numeric columns without ranges are refused (``ValueError`` naming them and
    ``ranges=``), as is a table of both kinds. ``drop``: columns to leave out. What the sample
    could not decide is warned as :class:`DraftNote` (a ``UserWarning``). Publish the draft with
    ``spec.to_json()`` (``python -m aggregator create --spec``) or fit on it,
    ``LDPNaiveBayes(spec=spec)``."""
    notes: list[str] = []
    table = read_frame(frame, label, ranges, caller="draft_spec", notes=notes, drop=drop)
    # Values as written, as a CSV holds them and as a device compares them (True, 3 and 3.5 as "True", "3", "3.5").
    table.y = table.y.astype(str).astype(object)
    if table.ranges is None:
        table.X = table.X.astype(str).astype(object)
    spec, more = draft_table_spec(table, protocol, epsilon, model, bins, approach, budget, class_share, people)
    for note in notes + more:
        warnings.warn(note.removeprefix("warning: "), DraftNote, stacklevel=2)
    return spec


def draft_table_spec(
    table: Table,
    protocol: str = "auto",
    epsilon: float = 1.0,
    model: str = "discrete",
    bins: int = 4,
    approach: int = 3,
    budget: str = "one-report",
    class_share: float | None = None,
    people: int | None = None,
) -> tuple[CollectionSpec, list[str]]:
    """The spec for ``table`` and what the operator should check; raises ``SpecError``. With the
    number of ``people`` expected, a discrete spec's notes say how surely their reports will name
    the sample's most common class (:func:`majority_note`)."""
    counts = Counter(table.y.tolist())
    classes = sorted(counts)
    notes = [f"classes from the sample: {classes}; a device holding another reports one of them drawn at random"]
    notes += unseen_notes("the class", counts, len(table.y))
    common, most = counts.most_common(1)[0]
    if most / len(table.y) >= UNEVEN and class_share is None and people is None:
        notes.append(
            f"{most / len(table.y):.0%} of the sample is {common!r}: with uneven classes and a small epsilon the "
            "reports may name the wrong most common class; a larger --class-share buys a surer class prior at the "
            "features' expense (documentation, Who reports the class)"
        )
    if table.ranges is None:
        if model != "discrete":
            notes.append("the sample is categorical: --model gaussian needs numeric columns; drafting a discrete model")
        features = []
        for j, name in enumerate(table.feature_names):
            categories = sorted(set(table.X[:, j].tolist()))
            features.append(Feature(name, categories))
            notes += unseen_notes(f"column {name!r}", Counter(table.X[:, j].tolist()), len(table.y))
            if len(categories) == 1:
                notes.append(f"column {name!r} has one value in the sample: add the others it may take, or drop it")
        notes.append(
            "categories come from the sample: a device holding a value it lacks reports a declared value drawn at "
            "random instead (noise in the estimates); add the values it may take"
        )
        spec = CollectionSpec(
            features, classes, protocol, epsilon, label=table.label_name, budget=budget, class_share=class_share
        )
        return spec, notes + majority_note(spec, counts, people)
    inputs = tuple(ContinuousFeature(n, lo, hi) for n, (lo, hi) in zip(table.feature_names, table.ranges))
    preparation = Preparation(inputs, None, bins if model == "discrete" else None)
    spec = CollectionSpec(
        [], classes, protocol, epsilon, label=table.label_name, continuous=preparation, model=model,
        approach=approach, budget=budget, class_share=class_share,
    )  # fmt: skip
    notes.append("no projection: a PCA or DCA must be fitted on a separate reference sample, never on the surveyed people")
    return spec, notes + majority_note(spec, counts, people)


def unseen_share(counts: Counter, m: int) -> float:
    """Good–Turing's estimate of the share of records holding a value a sample of ``m`` rows never
    showed: the share of the sample's rows whose value it holds exactly once."""
    return sum(1 for c in counts.values() if c == 1) / m


def unseen_notes(what: str, counts: Counter, m: int) -> list[str]:
    """A note when a column (or the class) shows values once in the sample: by
    :func:`unseen_share` about that share of other records hold a value the sample never showed,
    which a spec drafted from it refuses."""
    share = unseen_share(counts, m)
    if not share:
        return []
    once = sorted(str(v) for v, c in counts.items() if c == 1)
    shown = ", ".join(repr(v) for v in once[:3]) + (f" and {len(once) - 3} more" if len(once) > 3 else "")
    return [
        f"{what}: {len(once)} value(s) appear once in the sample ({shown}): by Good-Turing about {share:.1%} of "
        "other records hold a value it never showed, which the spec refuses; add the values you know, or "
        "replay with --skip-unknown"
    ]


def majority_note(spec: CollectionSpec, counts: Counter, people: int | None) -> list[str]:
    """For a ``spec`` and an expected number of ``people``, one note: how often their
    reports would name another class than the sample's most common one (the sample's class
    ``counts`` taken as the population's shares), what that costs the class prior alone, and the
    class share that would keep the cost within :data:`~aggregator.estimation.planning.TOLERATED_COST`
    (:mod:`aggregator.estimation.planning`). No note without ``people``. A gaussian model's class counts come
    from the class input alone, so its forecast is that input's."""
    from dataclasses import replace

    from ..estimation.planning import TOLERATED_COST, class_share_for, majority_outlook

    if people is None:
        return []
    prior = np.array([counts[c] for c in spec.classes], dtype=float)
    prior /= prior.sum()
    common = spec.classes[int(prior.argmax())]
    outlook = majority_outlook(spec, prior, people)
    note = (
        f"with {people:,} people the reports would name another class than {common!r} the most common in "
        f"{share_text(outlook.wrong)} of collections, costing the class prior alone {outlook.cost:.3f} accuracy on "
        "average (the sample's class shares taken as the population's)"
    )
    if outlook.cost > TOLERATED_COST:
        share = class_share_for(spec, prior, people)
        if share is not None:
            better = majority_outlook(replace(spec, class_share=share), prior, people)
            note += (
                f"; --class-share {share:g} would make it {share_text(better.wrong)} ({better.cost:.3f}), at the features' "
                "expense (documentation, Who reports the class)"
            )
        elif prior.max() >= UNEVEN:
            note += f"; to keep it within {TOLERATED_COST:g}, more people or a larger --eps"
    return [note]


def share_text(p: float) -> str:
    """A probability as a percentage, ``"under 0.1%"`` below a thousandth."""
    return "under 0.1%" if p < 0.001 else f"{p:.1%}"


def spec_json(spec: CollectionSpec) -> str:
    return json.dumps(spec.to_dict(), indent=2) + "\n"
