"""The assembled Naive Bayes model: predicts from raw records, exports to scikit-learn."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from participant.encoding import encode_features, feature_rows
from participant.spec import CollectionSpec

if TYPE_CHECKING:
    from scipy import sparse
    from sklearn.pipeline import Pipeline


def one_hot(codes: np.ndarray, n_categories) -> sparse.csr_matrix:
    """Rows of integer ``codes`` ``(m, F)`` one-hot over every feature's categories, a sparse
    ``(m, Σ n_i)`` matrix: a model's joint log-likelihoods of all rows are one product with it."""
    from scipy import sparse  # here: a command that only parses its options never loads scipy

    offsets = np.concatenate([[0], np.cumsum(n_categories)])
    m, n = codes.shape
    flat = (codes + offsets[:-1]).ravel()
    return sparse.csr_matrix((np.ones(m * n), (np.repeat(np.arange(m), n), flat)), shape=(m, offsets[-1]))


class NaiveBayesModel:
    """A categorical Naive Bayes model over the spec's features and classes.

    ``class_log_prior`` has shape ``(k,)``; ``feature_log_prob[i]`` has shape ``(k, n_i)`` and
    holds ``log P(F_i = category | class)`` in spec order, as scikit-learn's ``CategoricalNB`` does.
    ``class_count`` and ``category_count`` are the (post-processed) estimated counts behind them.
    ``temperature`` (in (0, 1]) scales the joint log-likelihoods before they are normalised into
    class probabilities (:mod:`aggregator.estimation.calibration`); predictions do not depend on it.
    ``strength`` is the smoothing strength the conditionals were smoothed at
    (:mod:`aggregator.estimation.smoothing`), None for a model that was not smoothed (``paper``).
    """

    def __init__(
        self,
        spec: CollectionSpec,
        class_count,
        category_count,
        temperature: float = 1.0,
        strength: float | None = None,
    ):
        self.spec = spec
        self.classes_ = np.asarray(spec.classes, dtype=object)
        self.class_count = np.asarray(class_count, dtype=float)
        self.category_count = [np.asarray(c, dtype=float) for c in category_count]
        if (self.class_count <= 0).any() or any((c <= 0).any() for c in self.category_count):
            raise ValueError("counts must be positive; post-process estimates before building a model")
        if not 0 < temperature <= 1:
            raise ValueError(f"temperature must be in (0, 1], not {temperature!r}")
        self.temperature = float(temperature)
        self.strength = None if strength is None else float(strength)
        self.class_log_prior = np.log(self.class_count) - np.log(self.class_count.sum())
        self.feature_log_prob = [np.log(c) - np.log(c.sum(axis=1, keepdims=True)) for c in self.category_count]

    def to_dict(self) -> dict:
        """Plain JSON/msgpack types: the spec, the counts, the log-probabilities they imply, the
        temperature of the class probabilities and the smoothing strength (None: not smoothed)."""
        return {
            "spec": self.spec.to_dict(),
            "classes": list(self.spec.classes),
            "class_count": self.class_count.tolist(),
            "category_count": [c.tolist() for c in self.category_count],
            "class_log_prior": self.class_log_prior.tolist(),
            "feature_log_prob": [t.tolist() for t in self.feature_log_prob],
            "temperature": self.temperature,
            "strength": self.strength,
        }

    @classmethod
    def from_dict(cls, data: dict) -> NaiveBayesModel:
        """The model :meth:`to_dict` describes (rebuilt from its counts; a model saved before
        temperatures were chosen has 1, one saved before strengths were recorded None)."""
        spec = CollectionSpec.from_dict(data["spec"])
        return cls(
            spec, data["class_count"], data["category_count"], data.get("temperature", 1.0), data.get("strength")
        )

    @property
    def class_prior(self) -> np.ndarray:
        return np.exp(self.class_log_prior)

    def joint_log_likelihood_codes(self, codes: np.ndarray) -> np.ndarray:
        """``log P(c) + Σ_i log P(x_i | c)`` for integer-coded rows; shape ``(m, k)``."""
        jll = np.tile(self.class_log_prior, (codes.shape[0], 1))
        for i, table in enumerate(self.feature_log_prob):
            jll += table[:, codes[:, i]].T
        return jll

    def predict_log_proba(self, X) -> np.ndarray:
        """Log posterior class probabilities of raw records ``X`` (m, n) at the model's
        temperature; shape ``(m, k)``."""
        jll = self.temperature * self.joint_log_likelihood_codes(self.codes(X))
        from scipy.special import logsumexp  # here: a command that only parses its options never loads scipy

        return jll - logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior class probabilities, shape ``(m, k)``, columns in ``classes_`` order."""
        return np.exp(self.predict_log_proba(X))

    def codes(self, X) -> np.ndarray:
        """Category codes ``(m, n)`` of raw records ``X``: a DataFrame with the spec's feature
        names as columns, a list of dicts, or rows in spec order (what a scikit-learn pipeline
        takes, :func:`participant.encoding.feature_rows`); an unknown value raises
        :class:`~participant.errors.RecordError` naming its feature."""
        return encode_features(feature_rows(X, self.spec), self.spec)

    def predict(self, X) -> np.ndarray:
        """The most probable class label of each raw record (see :meth:`codes`); shape ``(m,)``."""
        jll = self.joint_log_likelihood_codes(self.codes(X))
        return self.classes_[np.argmax(jll, axis=1)]

    def score(self, X, y) -> float:
        """Accuracy on raw records ``X`` with labels ``y``."""
        return float(np.mean(self.predict(X) == np.asarray(y, dtype=object)))

    def to_sklearn(self):
        """A fitted ``CategoricalNB`` on ordinal codes (category index in spec order), holding
        this model's probabilities. Below temperature 1 its log-probabilities are this model's
        times the temperature, so that its ``predict_proba`` is this model's (and its ``predict``
        the same); ``partial_fit`` on it would recompute them from the counts."""
        from sklearn.naive_bayes import CategoricalNB

        nb = CategoricalNB()
        nb.classes_ = np.asarray(self.spec.classes)
        nb.n_features_in_ = len(self.spec.features)
        nb.n_categories_ = np.array([len(f.categories) for f in self.spec.features])
        nb.class_count_ = self.class_count.copy()
        nb.category_count_ = [c.copy() for c in self.category_count]
        nb.class_log_prior_ = self.temperature * self.class_log_prior
        nb.feature_log_prob_ = [self.temperature * t for t in self.feature_log_prob]
        return nb

    def to_sklearn_pipeline(self) -> Pipeline:
        """The spec's encoding then :meth:`to_sklearn`: takes raw records as a DataFrame with the
        spec's feature names as columns, a list of dicts, or rows in spec order
        (:func:`participant.encoding.feature_rows`), then the spec's encoding
        (:func:`participant.encoding.encode_features`: categories as their index, continuous
        values through the spec's preparation and equal-width bins), whose refusal of an unknown
        value names the feature."""
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import FunctionTransformer

        rows = FunctionTransformer(partial(feature_rows, spec=self.spec))
        encode = FunctionTransformer(partial(encode_features, spec=self.spec))
        return Pipeline([("rows", rows), ("encode", encode), ("nb", self.to_sklearn())])
