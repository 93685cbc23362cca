"""One simulated collection: split, every training row sends one report, estimate, score."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import CategoricalNB, GaussianNB

from aggregator import CollectionStatistics, build_model
from aggregator.reduction import fit_projection
from participant import CollectionSpec, Feature, choose_inputs, encode_features, encode_labels, population_inputs
from participant.continuous import ContinuousFeature, Preparation
from participant.reporting import PerturbedInputs, perturb_population
from protocols import DEFAULT_THETA

from .datasets import Dataset

TEST_SIZE = 0.2


# Bins per coordinate the paper used (section 4.2).
PAPER_BINS = {"australian": 2, "diabetes": 4}


@dataclass(frozen=True)
class Setup:
    """How a continuous data set is collected: ``model`` "discrete" (``bins`` equal-width bins)
    or "gaussian" (multi-dimensional ``approach`` 1, 2 or 3), optionally after reducing to
    ``components`` coordinates with ``reduce`` ("pca" or "dca")."""

    model: str = "discrete"
    bins: int | None = None
    reduce: str | None = None
    components: int | None = None
    approach: int = 3

    def describe(self) -> str:
        what = f"{self.model} model"
        what += f", {self.bins} bins" if self.model == "discrete" and self.bins else ""
        what += f", approach {self.approach}" if self.model == "gaussian" else ""
        if self.reduce:
            what += f", {self.reduce.upper()} to {self.components} component(s) fitted on the training split"
        return what


def spec_for(
    dataset: Dataset,
    protocol: str,
    epsilon: float,
    theta: float = DEFAULT_THETA,
    setup: Setup | None = None,
    X_train=None,
    y_train=None,
) -> CollectionSpec:
    """The collection spec an operator would publish for ``dataset``: its documented domains, or
    for a continuous data set its declared ranges, with a projection fitted on
    ``X_train, y_train`` when ``setup.reduce`` asks for one. (A real collection fits it on a
    separate reference sample: fitting on the surveyed people, as the paper's experiments do,
    leaks information about them outside the LDP guarantee.)"""
    setup = setup or Setup()
    if not dataset.continuous:
        if setup != Setup(model="discrete", bins=setup.bins):
            raise ValueError(f"{dataset.name} is categorical: it takes neither --model gaussian nor --reduce")
        features = [Feature(name, cats) for name, cats in zip(dataset.feature_names, dataset.categories)]
        return CollectionSpec(features, dataset.classes, protocol, epsilon, theta=theta, label=dataset.label_name)
    inputs = tuple(ContinuousFeature(name, lo, hi) for name, (lo, hi) in zip(dataset.feature_names, dataset.ranges))
    projection = None
    if setup.reduce:
        projection = fit_projection(setup.reduce, X_train, y_train, inputs, setup.components or 1)
    bins = (setup.bins or PAPER_BINS.get(dataset.name, 4)) if setup.model == "discrete" else None
    return CollectionSpec(
        [],
        dataset.classes,
        protocol,
        epsilon,
        theta=theta,
        label=dataset.label_name,
        continuous=Preparation(inputs, projection, bins),
        model=setup.model,
        approach=setup.approach,
    )


@dataclass
class RunResult:
    """Test accuracies of one repetition: per estimator, and of non-private Naive Bayes."""

    seed: int
    accuracy: dict[str, float]
    nonprivate_accuracy: float
    n_train: int


def simulate_reports(spec: CollectionSpec, X_train, y_train, rng) -> PerturbedInputs:
    """Every training row becomes one participant with one report, drawn from ``rng``."""
    inputs = population_inputs(spec, X_train, y_train)
    chosen = choose_inputs(spec, len(inputs[0]), rng)
    return perturb_population(spec, inputs, chosen, rng)


def collect(spec: CollectionSpec, X_train, y_train, rng) -> CollectionStatistics:
    """The aggregate of :func:`simulate_reports`, computed in process."""
    stats = CollectionStatistics(spec)
    stats.add_population(simulate_reports(spec, X_train, y_train, rng))
    return stats


def split(dataset: Dataset, seed: int):
    """The random 80/20 split of repetition ``seed``: ``X_train, X_test, y_train, y_test``."""
    return train_test_split(dataset.X, dataset.y, test_size=TEST_SIZE, random_state=seed)


def nonprivate_accuracy(spec: CollectionSpec, X_train, y_train, X_test, y_test) -> float:
    """Accuracy of the non-private counterpart on the raw training rows, with the same encoding:
    scikit-learn's CategoricalNB (Laplace smoothing) on the categories or bins, or GaussianNB on
    the prepared (normalised, projected) coordinates."""
    if spec.model == "gaussian":
        prepare = spec.continuous.transform
        nb = GaussianNB().fit(prepare(X_train), encode_labels(y_train, spec))
        return float(nb.score(prepare(X_test), encode_labels(y_test, spec)))
    n_categories = [len(f.categories) for f in spec.features]
    nb = CategoricalNB(min_categories=n_categories).fit(encode_features(X_train, spec), encode_labels(y_train, spec))
    return float(nb.score(encode_features(X_test, spec), encode_labels(y_test, spec)))


def run_once(
    dataset: Dataset,
    protocol: str,
    epsilon: float,
    seed: int,
    estimators: tuple[str, ...] = ("paper",),
    theta: float = DEFAULT_THETA,
    setup: Setup | None = None,
) -> RunResult:
    """One repetition: a random 80/20 split and one collection, scored by every named estimator
    on the same reports. Deterministic given ``seed``."""
    X_train, X_test, y_train, y_test = split(dataset, seed)
    spec = spec_for(dataset, protocol, epsilon, theta, setup, X_train, y_train)
    stats = collect(spec, X_train, y_train, np.random.default_rng(seed))
    accuracy = {name: build_model(stats, name).score(X_test, y_test) for name in estimators}
    return RunResult(seed, accuracy, nonprivate_accuracy(spec, X_train, y_train, X_test, y_test), len(y_train))
