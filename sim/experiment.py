"""One simulated collection: split, every training row sends one report, estimate, score."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import CategoricalNB

from aggregator import CollectionStatistics, build_model
from participant import CollectionSpec, Feature, choose_inputs, encode_features, encode_labels, input_values
from participant.reporting import PerturbedInputs, perturb_population
from protocols import DEFAULT_THETA

from .datasets import Dataset

TEST_SIZE = 0.2


def spec_for(dataset: Dataset, protocol: str, epsilon: float, theta: float = DEFAULT_THETA) -> CollectionSpec:
    """The collection spec an operator would publish for ``dataset``: its documented domains."""
    features = [Feature(name, cats) for name, cats in zip(dataset.feature_names, dataset.categories)]
    return CollectionSpec(features, dataset.classes, protocol, epsilon, theta=theta, label=dataset.label_name)


@dataclass
class RunResult:
    """Test accuracies of one repetition: per estimator, and of non-private Naive Bayes."""

    seed: int
    accuracy: dict[str, float]
    nonprivate_accuracy: float
    n_train: int


def simulate_reports(spec: CollectionSpec, X_train, y_train, rng) -> PerturbedInputs:
    """Every training row becomes one participant with one report, drawn from ``rng``."""
    codes, labels = encode_features(X_train, spec), encode_labels(y_train, spec)
    inputs = input_values(codes, labels, spec.n_classes)
    chosen = choose_inputs(spec, len(labels), rng)
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
    """Accuracy of scikit-learn's CategoricalNB (Laplace smoothing) on the raw training rows."""
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
) -> RunResult:
    """One repetition: a random 80/20 split and one collection, scored by every named estimator
    on the same reports. Deterministic given ``seed``."""
    spec = spec_for(dataset, protocol, epsilon, theta)
    X_train, X_test, y_train, y_test = split(dataset, seed)
    stats = collect(spec, X_train, y_train, np.random.default_rng(seed))
    accuracy = {name: build_model(stats, name).score(X_test, y_test) for name in estimators}
    return RunResult(seed, accuracy, nonprivate_accuracy(spec, X_train, y_train, X_test, y_test), len(y_train))
