"""A scikit-learn classifier whose ``fit`` simulates an LDP collection of its training rows."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import OrdinalEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from aggregator import build_model
from aggregator.operator.csvdata import read_frame
from participant.encoding import encode_features, encode_labels, raw_field_names
from participant.errors import RecordError
from participant.spec import CollectionSpec, Feature
from protocols import DEFAULT_THETA

from .datasets import Dataset
from .experiment import Setup, collect, halved_collection, simulate_collection, spec_for


class LDPNaiveBayes(ClassifierMixin, BaseEstimator):
    """Categorical Naive Bayes learned from locally differentially private reports.

    ``fit(X, y)`` treats every training row as one participant of a collection with the given
    ``protocol`` and ``epsilon`` (each person spends ``epsilon`` with the default
    ``budget="one-report"``; see :class:`~participant.spec.CollectionSpec`), simulates their
    reports (``mode="fast"`` draws the aggregates from their exact distribution, ``"replay"``
    every report), and assembles the model with ``estimator``.

    **Numbers.** Columns of floats (and columns of numbers with many distinct values, or any
    column given a range) are numeric, read as ``python -m sim --csv`` reads them (the same code,
    :func:`aggregator.operator.csvdata.read_frame`): each needs a declared range,
    ``ranges={"alcohol": (8, 15), ...}`` (keys may be patterns, ``"x*"``; a value outside its range
    is clipped, as a device clips it), or ``ranges="data"`` to take the training rows' least and
    greatest values, which leaks them outside the LDP guarantee and is warned (``UserWarning``).
    Without either a fit on numeric columns is refused (``ValueError`` naming them and
    ``ranges=``). Numeric columns are then binned into ``bins`` equal-width bins
    (``model="discrete"``) or modelled as a Gaussian per class (``model="gaussian"``, with the
    multi-dimensional ``approach``), as a collection with that spec would be. A collection is all
    numeric or all categorical: a table holding both is refused.

    **Categories.** Other columns (strings, booleans, pandas categories, integers with few values)
    are categorical: every distinct value is a category (``categories="auto"``) or the lists given
    in ``categories`` are the declared domains (every column then categorical). A category unknown at prediction time is refused
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
        ranges=None,
        model: str = "discrete",
        bins: int = 4,
        approach: int = 3,
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
        self.ranges = ranges
        self.model = model
        self.bins = bins
        self.approach = approach

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
            names = list(raw_field_names(self.spec)[:-1])
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
        table = self._table(X, y, fitting=True)
        dtypes = list(table.dtypes) if hasattr(table, "columns") else None
        X, y = validate_data(self, table, y, dtype=None)
        check_classification_targets(y)
        if self.spec is not None:
            return self._fit_declared(X, y)
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"LDPNaiveBayes needs at least two classes; y has {len(self.classes_)} class")
        classes = [str(c) for c in self.classes_]
        if len(set(classes)) != len(classes):
            classes = [f"{j}:{c}" for j, c in enumerate(self.classes_)]
        numeric = self._numeric_table(X, dtypes, np.asarray(classes, dtype=object)[labels]) if self.categories == "auto" else None
        if numeric is not None:
            return self._fit_numeric(numeric, classes)
        self.encoder_ = OrdinalEncoder(
            categories=self.categories, handle_unknown="use_encoded_value", unknown_value=-1, dtype=np.int64
        ).fit(X)
        features = []
        for i, cats in enumerate(self.encoder_.categories_):
            names = [str(c) for c in cats]
            if len(set(names)) != len(names):
                names = [f"{j}:{c}" for j, c in enumerate(cats)]
            features.append(Feature(f"x{i}", names))
        self.spec_ = CollectionSpec(
            features, classes, self.protocol, self.epsilon, theta=self.theta, budget=self.budget
        )
        return self._collect(self.encoder_.transform(X), labels)

    def _fit_declared(self, X, y):
        """``fit`` with the domains, classes and randomisation of :attr:`spec` (nothing from the data)."""
        spec = self.spec
        self.classes_ = np.asarray(spec.classes, dtype=object)
        if spec.continuous is not None:
            if len(spec.continuous.inputs) != X.shape[1]:
                raise ValueError(f"spec declares {len(spec.continuous.inputs)} numeric features; X has {X.shape[1]} columns")
            self.spec_ = spec
            rng = np.random.default_rng(self.random_state)
            self.model_ = build_model(collect(spec, X, y, rng, self.mode, halves=self.estimator == "auto"), self.estimator)
            return self
        if len(spec.features) != X.shape[1]:
            raise ValueError(f"spec declares {len(spec.features)} categorical features; X has {X.shape[1]} columns")
        labels = encode_labels(y, spec)
        self.encoder_ = OrdinalEncoder(
            categories=[list(f.categories) for f in spec.features],
            handle_unknown="use_encoded_value",
            unknown_value=-1,
            dtype=np.int64,
        ).fit([[f.categories[0] for f in spec.features]])  # the categories are given: one row fits it
        self.spec_ = spec
        return self._collect(encode_features(np.asarray(X, dtype=object), spec), labels)

    def _feature_names(self, n: int) -> list[str]:
        names = getattr(self, "feature_names_in_", None)
        return [str(c) for c in names] if names is not None else [f"x{i}" for i in range(n)]

    def _numeric_table(self, X: np.ndarray, dtypes, labels: np.ndarray):
        """The training rows as the command line reads a CSV
        (:func:`~aggregator.operator.csvdata.read_frame`): a table with declared (or, asked for, the
        data's) ranges when its columns are numeric, None when they are categorical. Its warnings
        become ``UserWarning``; a refusal names ``ranges=``."""
        import pandas as pd

        names = self._feature_names(X.shape[1])
        dtypes = dtypes or [X.dtype] * X.shape[1]
        frame = pd.DataFrame({name: X[:, j] for j, name in enumerate(names)})
        for name, dtype in zip(names, dtypes):
            if getattr(dtype, "kind", "O") == "f" and frame[name].isna().any():
                raise ValueError(f"Input X contains NaN in column {name!r}: impute or drop the missing numbers first")
        label = "class"
        while label in names:
            label += "_"
        frame[label] = labels
        notes: list[str] = []
        table = read_frame(
            frame, label, self.ranges, caller="LDPNaiveBayes", notes=notes, dtypes=dtypes, missing="category"
        )
        if table.ranges is None:
            return None
        for note in notes:
            if note.startswith("warning: "):
                warnings.warn(note.removeprefix("warning: "), UserWarning, stacklevel=4)
        return table

    def _fit_numeric(self, table, classes: list[str]):
        """``fit`` on numeric columns: the spec the command line builds for a continuous data set
        (:func:`~sim.experiment.spec_for`: the ranges, and ``bins`` or the Gaussian model), then
        the collection of every row."""
        if self.model not in ("discrete", "gaussian"):
            raise ValueError(f"model must be 'discrete' or 'gaussian', got {self.model!r}")
        dataset = Dataset(**vars(table))
        dataset.classes = classes  # in classes_ order, not sorted as strings
        setup = Setup(self.model, self.bins if self.model == "discrete" else None, approach=self.approach)
        self.spec_ = spec_for(dataset, self.protocol, self.epsilon, self.theta, setup, budget=self.budget)
        rng = np.random.default_rng(self.random_state)
        self.model_ = build_model(
            collect(self.spec_, table.X, table.y, rng, self.mode, halves=self.estimator == "auto"), self.estimator
        )
        return self

    def _collect(self, codes: np.ndarray, labels: np.ndarray):
        """Simulate the collection of the encoded rows and assemble :attr:`model_`."""
        k = len(self.classes_)
        inputs = [labels, *(codes * k + labels[:, None]).T]
        rng = np.random.default_rng(self.random_state)
        simulate = halved_collection if self.estimator == "auto" else simulate_collection
        self.model_ = build_model(simulate(self.spec_, inputs, rng, self.mode), self.estimator)
        return self

    def _joint_log_likelihood(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, self._table(X), dtype=None, reset=False)
        spec = self.spec_
        if spec.continuous is not None:  # clipped to the declared ranges, as a device clips them
            if spec.model == "gaussian":
                return self.model_.joint_log_likelihood_prepared(spec.continuous.transform(X))
            return self.model_.joint_log_likelihood_codes(encode_features(X, spec))
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
        jll *= getattr(self.model_, "temperature", 1.0)  # a Gaussian model has none
        return jll - np.logaddexp.reduce(jll, axis=1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior class probabilities, shape ``(m, k)``, columns in ``classes_`` order."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        jll = self._joint_log_likelihood(X)
        return self.classes_[np.argmax(jll, axis=1)]
