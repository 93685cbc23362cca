"""ε-DP linear SVM with a trusted curator: objective perturbation with the Huber loss
(Chaudhuri, Monteleoni and Sarwate 2011; Algorithm 2 of comparing-dp-classifiers.txt).

The guarantee needs every feature vector in the unit ball: categories are one-hot encoded and,
with a constant bias coordinate, scaled by ``1/sqrt(n + 1)`` so that ``‖x‖ = 1`` exactly. Then,
with ``h = 0.05`` and ``Λ = 10^-2.5`` as in the paper:

    ε' = ε − log(1 + 1/(n h Λ) + 1/(4 n² h² Λ²));
    if ε' > 0: ε'' = ε', Λ' = Λ, else ε'' = ε/2, Λ' = 1/(2 n h (e^{ε/4} − 1));
    b ~ density ∝ exp(−ε''‖b‖/2)  (norm Gamma(d, 2/ε''), direction uniform);
    w = argmin (1/n) Σ l_h(y_i w·x_i) + (Λ'/2)‖w‖² + (1/n) bᵀw.

Classes are ±1; with k > 2 classes, one classifier per class against the rest, each at ε/k
(every row takes part in all k, so the budgets add up).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize

from .decision_tree import one_hot

HUBER = 0.05
RIDGE = 10**-2.5


def huber(z: np.ndarray, h: float = HUBER) -> tuple[np.ndarray, np.ndarray]:
    """The Huber hinge loss and its derivative at margins ``z``."""
    loss = np.where(z > 1 + h, 0.0, np.where(z < 1 - h, 1 - z, (1 + h - z) ** 2 / (4 * h)))
    grad = np.where(z > 1 + h, 0.0, np.where(z < 1 - h, -1.0, -(1 + h - z) / (2 * h)))
    return loss, grad


def privacy_parameters(epsilon: float, n: int, h: float = HUBER, ridge: float = RIDGE) -> tuple[float, float]:
    """``(ε'', Λ')`` of Algorithm 2 for ``n`` training rows."""
    eps_prime = epsilon - math.log(1 + 1 / (n * h * ridge) + 1 / (4 * n**2 * h**2 * ridge**2))
    if eps_prime > 0:
        return eps_prime, ridge
    return epsilon / 2, 1 / (2 * n * h * (math.exp(epsilon / 4) - 1))


def perturbation(rng, epsilon: float, d: int) -> np.ndarray:
    """A vector with density ∝ exp(−ε‖b‖/2) in d dimensions."""
    direction = rng.normal(size=d)
    return direction / np.linalg.norm(direction) * rng.gamma(d, 2 / epsilon)


def fit_binary(X: np.ndarray, y: np.ndarray, epsilon: float | None, rng) -> np.ndarray:
    """The weight vector for labels ``y`` in {−1, +1} (no noise when ``epsilon`` is None)."""
    n, d = X.shape
    if epsilon is None:
        eps2, ridge, b = None, RIDGE, np.zeros(d)
    else:
        eps2, ridge = privacy_parameters(epsilon, n)
        b = perturbation(rng, eps2, d)

    def objective(w):
        loss, grad = huber(y * (X @ w))
        value = loss.mean() + ridge / 2 * w @ w + b @ w / n
        gradient = X.T @ (grad * y) / n + ridge * w + b / n
        return value, gradient

    return minimize(objective, np.zeros(d), jac=True, method="L-BFGS-B").x


class DPSVM:
    """``n_categories`` for categorical codes, or ``bounds`` (declared ``[l, u]`` per attribute)
    for numerical values; either way every feature vector lands in the unit ball."""

    def __init__(self, epsilon: float | None, n_categories: list[int] | None, n_classes: int, rng=None, bounds=None):
        self.epsilon = epsilon
        self.n_categories = None if n_categories is None else list(n_categories)
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=float)
        self.n_classes = n_classes
        self.rng = np.random.default_rng(rng)

    def features(self, X: np.ndarray) -> np.ndarray:
        """Categorical: one-hot plus a bias coordinate over ``sqrt(n + 1)`` (‖x‖ = 1). Numerical:
        each value mapped into [-1, 1] by its declared range, plus a bias, over ``sqrt(p + 1)``."""
        if self.bounds is not None:
            low, high = self.bounds[:, 0], self.bounds[:, 1]
            Z = 2 * (np.clip(np.asarray(X, dtype=float), low, high) - low) / (high - low) - 1
            return np.column_stack([Z, np.ones(len(X))]) / math.sqrt(Z.shape[1] + 1)
        B = np.column_stack([one_hot(X, self.n_categories), np.ones(len(X))]).astype(float)
        return B / math.sqrt(len(self.n_categories) + 1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPSVM:
        F = self.features(X)
        if self.n_classes == 2:
            eps = self.epsilon
            self.weights_ = fit_binary(F, np.where(y == 1, 1.0, -1.0), eps, self.rng)[None, :]
        else:
            eps = None if self.epsilon is None else self.epsilon / self.n_classes
            self.weights_ = np.array(
                [fit_binary(F, np.where(y == c, 1.0, -1.0), eps, self.rng) for c in range(self.n_classes)]
            )
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        scores = self.features(X) @ self.weights_.T
        return (scores[:, 0] > 0).astype(np.int64) if self.n_classes == 2 else np.argmax(scores, axis=1)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))
