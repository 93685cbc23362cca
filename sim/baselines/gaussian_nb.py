"""ε-DP Gaussian Naive Bayes with a trusted curator, for numerical attributes with declared bounds.

The provably ε-DP version of the numerical part of Algorithm 1 of comparing-dp-classifiers.txt
(and of Vaidya et al. 2013): the paper's sensitivities ``(u−l)/n_c`` and ``(u−l)/√n_c`` depend
on the private class count, so noise scaled by them is not differentially private. Here, with
values centred on the middle of their declared range ``[l, u]`` (so ``|x| ≤ h = (u−l)/2``):

- class counts: one histogram, Laplace(2/ε') per cell;
- per attribute, the per-class sums of x: replacing a row changes the table by at most ``2h`` in
  L1, so Laplace(2h/ε'); and the per-class sums of x²: at most ``2h²``, Laplace(2h²/ε');
- ``μ = S/ñ``, ``σ² = Q/ñ − μ²`` floored at ``(1e-3·h)²``; ``ε' = ε / (1 + 2·#numerical)``.
"""

from __future__ import annotations

import numpy as np

from .bounded import BoundedGaussianNB
from .noise import CLAMP, noisy_histogram


class DPGaussianNB(BoundedGaussianNB):
    def prepare(self, X) -> np.ndarray:
        """Values clipped to their bounds and centred on the middle, so that ``|x| <= h``."""
        return super().prepare(X) - self.bounds.mean(axis=1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPGaussianNB:
        eps, k = self.epsilon_per_query, self.n_classes
        Z, h = self.prepare(X), (self.bounds[:, 1] - self.bounds[:, 0]) / 2
        counts = noisy_histogram(np.bincount(y, minlength=k), eps, self.rng)
        onehot = np.eye(k)[y]
        sums = onehot.T @ Z  # (k, p)
        squares = onehot.T @ Z**2
        if eps is not None:
            sums = sums + self.rng.laplace(0, 2 * h / eps, sums.shape)
            squares = squares + self.rng.laplace(0, 2 * h**2 / eps, squares.shape)
        self.class_prior_ = counts / counts.sum()
        self.theta_ = np.clip(sums / counts[:, None], -h, h)
        mean_square = np.clip(squares / counts[:, None], 0, h**2)
        self.var_ = np.maximum(mean_square - self.theta_**2, (1e-3 * h) ** 2 + CLAMP)
        return self
