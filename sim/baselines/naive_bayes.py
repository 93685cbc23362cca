"""ε-DP Naive Bayes with a trusted curator: Algorithm 1 of comparing-dp-classifiers.txt (after
Vaidya et al. 2013), for categorical attributes.

The budget splits as ``ε' = ε / (1 + #categorical)``: each row is in one class count and in one
(value, class) count per attribute. Every histogram gets Laplace(2/ε') per cell (see
:mod:`sim.baselines.noise` for why 2, not the paper's 1) and is clamped at 1e-5 (L+); then
``P(c) = ñ_c / Σ ñ`` and ``P(A = v | c) = ñ_{Avc} / Σ_v ñ_{Avc}`` (normalised over values, so the
conditionals sum to one; the paper divides by ñ_c, which need not). Numerical attributes (noisy
means and deviations with declared bounds) are not implemented yet.
"""

from __future__ import annotations

import numpy as np

from .noise import noisy_histogram


class DPNaiveBayes:
    """Fit on integer codes ``X`` (m, n) with ``n_categories[i]`` values each and labels in ``[0, k)``."""

    def __init__(self, epsilon: float | None, n_categories: list[int], n_classes: int, rng=None):
        self.epsilon = epsilon
        self.n_categories = list(n_categories)
        self.n_classes = n_classes
        self.rng = np.random.default_rng(rng)

    @property
    def epsilon_per_query(self) -> float | None:
        """``ε' = ε / (1 + #categorical)``."""
        return None if self.epsilon is None else self.epsilon / (1 + len(self.n_categories))

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPNaiveBayes:
        eps, k = self.epsilon_per_query, self.n_classes
        class_counts = noisy_histogram(np.bincount(y, minlength=k), eps, self.rng)
        self.class_log_prior_ = np.log(class_counts / class_counts.sum())
        self.feature_log_prob_ = []
        for i, n_values in enumerate(self.n_categories):
            joint = np.bincount(X[:, i] * k + y, minlength=n_values * k).reshape(n_values, k)
            noisy = noisy_histogram(joint, eps, self.rng).T  # (k, n_values)
            self.feature_log_prob_.append(np.log(noisy / noisy.sum(axis=1, keepdims=True)))
        return self

    def predict_log_proba(self, X: np.ndarray) -> np.ndarray:
        jll = np.tile(self.class_log_prior_, (len(X), 1))
        for i, table in enumerate(self.feature_log_prob_):
            jll += table[:, X[:, i]].T
        return jll - np.logaddexp.reduce(jll, axis=1, keepdims=True)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmax(self.predict_log_proba(X), axis=1)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))
