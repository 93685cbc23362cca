"""A scikit-learn classifier whose ``fit`` simulates an LDP collection of its training rows."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import OrdinalEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from aggregator import build_model
from participant.encoding import encode_features, encode_labels
from participant.errors import RecordError
from participant.spec import CollectionSpec, Feature
from protocols import DEFAULT_THETA

from .experiment import simulate_collection


class LDPNaiveBayes(ClassifierMixin, BaseEstimator):
    """Categorical Naive Bayes learned from locally differentially private reports.

    ``fit(X, y)`` treats every training row as one participant of a collection with the given
    ``protocol`` and ``epsilon`` (each person spends ``epsilon`` with the default
    ``budget="one-report"``; see :class:`~participant.spec.CollectionSpec`), simulates their
    reports (``mode="fast"`` draws the aggregates from their exact distribution, ``"replay"``
    every report), and assembles the model with ``estimator``. Features are categorical: every
    distinct value is a category (``categories="auto"``) or the lists given in ``categories``
    are the declared domains. A category unknown at prediction time is refused
    (:class:`~participant.errors.RecordError` naming the feature, as the exported pipeline and a
    device refuse it) when the domains were declared (``spec``), and contributes no evidence when
    they came from the training data, where a cross-validation fold can miss a rare value;
    ``handle_unknown="error"`` or ``"ignore"`` says which whatever the domains.

    **A fit is a simulation, not an LDP release.** With ``categories="auto"`` the domains (and
    with them the model's shape) and the classes come from the training data itself: a value held
    by one person shows in the fitted model whatever the noise. And the reports are drawn from a
    seeded numpy generator (``random_state``), not a device's CSPRNG. For a fit whose only input
    from the people is their randomised reports, pass ``spec`` (a
    :class:`~participant.spec.CollectionSpec` declared beforehand, e.g. by ``python -m aggregator
    spec`` on a public sample): its features' categories, its classes, protocol, ε, θ and budget
    are used, and a record outside its declared values is refused, as a device would refuse it.

    ``X`` is what scikit-learn users hold: an array, a DataFrame, or a list of records as dicts.
    Records and DataFrames are matched by field name: with ``spec``, its features are picked and
    anything else (the label) is ignored; without, ``fit`` takes every field (less the label
    when ``y`` is a named pandas Series), and prediction picks the fields ``fit`` saw.

    Parameters mirror the simulator's options; ``random_state`` seeds the simulated randomness.
    """

    def __init__(
        self,
        protocol: str = "auto",
        epsilon: float = 1.0,
        estimator: str = "normsub",
        mode: str = "fast",
        budget: str = "one-report",
        theta: float = DEFAULT_THETA,
        categories="auto",
        random_state=None,
        spec: CollectionSpec | None = None,
        handle_unknown: str | None = None,
    ):
        self.protocol = protocol
        self.epsilon = epsilon
        self.estimator = estimator
        self.mode = mode
        self.budget = budget
        self.theta = theta
        self.categories = categories
        self.random_state = random_state
        self.spec = spec
        self.handle_unknown = handle_unknown

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        # Accuracy is bounded by the privacy noise, so score-based checks do not apply.
        tags.classifier_tags.poor_score = True
        return tags

    def _table(self, X, y=None, fitting: bool = False):
        """``X`` as ``validate_data`` takes it: a list of records becomes a DataFrame; a DataFrame's
        columns are the spec's features, or those ``fit`` saw (a label column is dropped)."""
        if isinstance(X, (list, tuple)) and X and isinstance(X[0], Mapping):
            import pandas as pd

            X = pd.DataFrame.from_records(X)
        if not hasattr(X, "columns"):
            return X
        if self.spec is not None:
            names = [f.name for f in self.spec.features]
        elif not fitting and hasattr(self, "feature_names_in_"):
            names = list(self.feature_names_in_)
        else:
            label = getattr(y, "name", None)
            names = [c for c in X.columns if c != label]
        missing = [n for n in names if n not in X.columns]
        if missing:
            raise ValueError(f"X has no column {missing[0]!r} (the model's features: {names})")
        return X[names]

    def fit(self, X, y):
        """Simulate the collection of ``X, y`` (one participant per row) and assemble the model."""
        X, y = validate_data(self, self._table(X, y, fitting=True), y, dtype=None)
        check_classification_targets(y)
        if self.spec is not None:
            return self._fit_declared(X, y)
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"LDPNaiveBayes needs at least two classes; y has {len(self.classes_)} class")
        self.encoder_ = OrdinalEncoder(
            categories=self.categories, handle_unknown="use_encoded_value", unknown_value=-1, dtype=np.int64
        ).fit(X)
        features = []
        for i, cats in enumerate(self.encoder_.categories_):
            names = [str(c) for c in cats]
            if len(set(names)) != len(names):
                names = [f"{j}:{c}" for j, c in enumerate(cats)]
            features.append(Feature(f"x{i}", names))
        classes = [str(c) for c in self.classes_]
        if len(set(classes)) != len(classes):
            classes = [f"{j}:{c}" for j, c in enumerate(self.classes_)]
        self.spec_ = CollectionSpec(
            features, classes, self.protocol, self.epsilon, theta=self.theta, budget=self.budget
        )
        return self._collect(self.encoder_.transform(X), labels)

    def _fit_declared(self, X, y):
        """``fit`` with the domains, classes and randomisation of :attr:`spec` (nothing from the data)."""
        spec = self.spec
        if spec.continuous is not None or len(spec.features) != X.shape[1]:
            raise ValueError(f"spec declares {len(spec.features)} categorical features; X has {X.shape[1]} columns")
        self.classes_ = np.asarray(spec.classes, dtype=object)
        labels = encode_labels(y, spec)
        self.encoder_ = OrdinalEncoder(
            categories=[list(f.categories) for f in spec.features],
            handle_unknown="use_encoded_value",
            unknown_value=-1,
            dtype=np.int64,
        ).fit([[f.categories[0] for f in spec.features]])  # the categories are given: one row fits it
        self.spec_ = spec
        return self._collect(encode_features(np.asarray(X, dtype=object), spec), labels)

    def _collect(self, codes: np.ndarray, labels: np.ndarray):
        """Simulate the collection of the encoded rows and assemble :attr:`model_`."""
        k = len(self.classes_)
        inputs = [labels, *(codes * k + labels[:, None]).T]
        rng = np.random.default_rng(self.random_state)
        self.model_ = build_model(simulate_collection(self.spec_, inputs, rng, self.mode), self.estimator)
        return self

    def _joint_log_likelihood(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, self._table(X), dtype=None, reset=False)
        if self.spec is not None:  # declared categories are compared as written, as a device does
            X = np.asarray(X, dtype=object).astype(str)
        codes = self.encoder_.transform(X)
        self._refuse_unknown(X, codes)
        jll = np.tile(self.model_.class_log_prior, (codes.shape[0], 1))
        for i, table in enumerate(self.model_.feature_log_prob):
            known = codes[:, i] >= 0
            jll[known] += table[:, codes[known, i]].T
        return jll

    def _refuse_unknown(self, X, codes: np.ndarray) -> None:
        """Raise :class:`RecordError` for the first value outside its feature's categories, unless
        unknown values are ignored (``handle_unknown``; by default, when the domains were inferred)."""
        handle = self.handle_unknown or ("error" if self.spec is not None else "ignore")
        if handle not in ("error", "ignore"):
            raise ValueError(f"handle_unknown must be 'error' or 'ignore', got {handle!r}")
        if handle == "ignore" or (codes >= 0).all():
            return
        row, column = np.argwhere(codes < 0)[0]
        names = getattr(self, "feature_names_in_", None)
        name = self.spec_.features[column].name if self.spec is not None else (
            str(names[column]) if names is not None else f"x{column}"
        )  # fmt: skip
        categories = [str(c) for c in self.encoder_.categories_[column]]
        raise RecordError(
            name, f"unknown value {str(np.asarray(X, dtype=object)[row, column])!r}; expected one of {categories} "
            "(handle_unknown='ignore' leaves such values out of the prediction)",
        )  # fmt: skip

    def predict_log_proba(self, X) -> np.ndarray:
        """Log posterior class probabilities at the model's temperature, shape ``(m, k)``."""
        jll = self._joint_log_likelihood(X)  # checks the fit before the model is read
        jll *= self.model_.temperature
        return jll - np.logaddexp.reduce(jll, axis=1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior class probabilities, shape ``(m, k)``, columns in ``classes_`` order."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        jll = self._joint_log_likelihood(X)
        return self.classes_[np.argmax(jll, axis=1)]
