"""``python -m aggregator spec``: draft a collection spec from a public sample of the data.

The sample gives the categories of each categorical column and the class labels; numeric columns
take the ranges the operator declares. The draft is the spec the service accepts (``create
--spec``) and the simulator runs (``python -m sim --spec``); what the sample could not decide is
printed, for the operator to settle before publishing.
"""

from __future__ import annotations

import json
from collections import Counter

from participant.continuous import ContinuousFeature, Preparation
from participant.spec import CollectionSpec, Feature

from .csvdata import Table

# A sample's most common class at this share or more gets the note on who reports the class.
UNEVEN = 0.6


def draft_spec(
    table: Table,
    protocol: str = "auto",
    epsilon: float = 1.0,
    model: str = "discrete",
    bins: int = 4,
    approach: int = 3,
    budget: str = "one-report",
    class_share: float | None = None,
) -> tuple[CollectionSpec, list[str]]:
    """The spec for ``table`` and what the operator should check; raises ``SpecError``."""
    counts = Counter(table.y.tolist())
    classes = sorted(counts)
    notes = [f"classes from the sample: {classes}; a label outside them will be refused"]
    common, most = counts.most_common(1)[0]
    if most / len(table.y) >= UNEVEN and class_share is None:
        notes.append(
            f"{most / len(table.y):.0%} of the sample is {common!r}: with uneven classes and a small epsilon the "
            "reports may name the wrong most common class; a larger --class-share buys a surer class prior at the "
            "features' expense (README, Who reports the class)"
        )
    if table.ranges is None:
        if model != "discrete":
            notes.append("the sample is categorical: --model gaussian needs numeric columns; drafting a discrete model")
        features = []
        for j, name in enumerate(table.feature_names):
            categories = sorted(set(table.X[:, j].tolist()))
            features.append(Feature(name, categories))
            if len(categories) == 1:
                notes.append(f"column {name!r} has one value in the sample: add the others it may take, or drop it")
        notes.append("categories come from the sample: values it does not hold will be refused by devices; add them")
        spec = CollectionSpec(
            features, classes, protocol, epsilon, label=table.label_name, budget=budget, class_share=class_share
        )
        return spec, notes
    inputs = tuple(ContinuousFeature(n, lo, hi) for n, (lo, hi) in zip(table.feature_names, table.ranges))
    preparation = Preparation(inputs, None, bins if model == "discrete" else None)
    spec = CollectionSpec(
        [], classes, protocol, epsilon, label=table.label_name, continuous=preparation, model=model,
        approach=approach, budget=budget, class_share=class_share,
    )  # fmt: skip
    notes.append("no projection: a PCA or DCA must be fitted on a separate reference sample, never on the surveyed people")
    return spec, notes


def spec_json(spec: CollectionSpec) -> str:
    return json.dumps(spec.to_dict(), indent=2) + "\n"
