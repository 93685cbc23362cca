"""What the numerical Naive Bayes baselines share: declared bounds and Gaussian prediction."""

from __future__ import annotations

import math

import numpy as np


class BoundedGaussianNB:
    """Gaussian Naive Bayes over attributes with declared bounds ``[l, u]``.

    Subclasses fit ``class_prior_`` (k,), ``theta_`` and ``var_`` (k, p) in the units that
    :meth:`prepare` maps values to.
    """

    def __init__(self, epsilon: float | None, bounds: list[tuple[float, float]], n_classes: int, rng=None):
        self.epsilon = epsilon
        self.bounds = np.asarray(bounds, dtype=float)
        self.n_classes = n_classes
        self.rng = np.random.default_rng(rng)

    @property
    def epsilon_per_query(self) -> float | None:
        """``ε' = ε / (1 + 2·#numerical)``: class counts, then two statistics per attribute."""
        return None if self.epsilon is None else self.epsilon / (1 + 2 * len(self.bounds))

    def prepare(self, X) -> np.ndarray:
        """Values clipped to their declared bounds."""
        return np.clip(np.asarray(X, dtype=float), self.bounds[:, 0], self.bounds[:, 1])

    def predict(self, X: np.ndarray) -> np.ndarray:
        Z = self.prepare(X)
        quad = ((Z[:, None, :] - self.theta_[None]) ** 2 / self.var_[None]).sum(axis=2)
        jll = np.log(self.class_prior_) - 0.5 * (np.log(2 * math.pi * self.var_).sum(axis=1)[None] + quad)
        return np.argmax(jll, axis=1)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))
