"""ε-DP Gaussian Naive Bayes with smooth-sensitivity noise (dp-naive-bayes-smooth-sensitivity.txt,
Algorithm 1), in a version that is provably ε-DP.

What the paper leaves open or gets wrong, and the choices here (see the papers' NOTES.md):

- The per-class sample size n_c is itself private: a replaced row can leave a class or join one.
  For values in [L, U], replacing, adding or removing one value of a class with m rows moves its
  mean by at most ``(U − L)/m`` and its population standard deviation by at most ``(U − L)/√m``
  (for the deviation: a decrease is at most σ/(m+1) ≤ (U−L)/(2(m+1)); an increase Δ satisfies
  Δ² ≤ |σ'² − σ²| ≤ (U−L)²/(m+1)). These bounds depend on m alone, and m moves by at most one per
  replaced row, so ``S(D) = max_k e^{−βk}·g(max(n_c − k, 1))`` is a β-smooth upper bound on the local
  sensitivity (g: the bound above).
- Noise: Nissim, Raskhodnikova and Smith: with density ∝ 1/(1 + z²) (Cauchy, γ = 2), releasing
  ``f + 6·S/ε_q · η`` is ε_q-DP when β ≤ ε_q/6. (Algorithm 1 prints √2·S/ε', which is not.)
- Budget: ``ε' = ε / (2·#numerical + 1)`` as in Algorithm 1 (class counts, then a mean and a
  deviation per attribute). A replaced row changes the statistics of at most two classes, so each
  class's mean (or deviation) gets ``ε_q = ε'/2`` and the attribute's vector of them costs ε'.
  Class counts take Laplace(2/ε') (a histogram under replacement).
- No trimming: the paper never gives its trimming size m; trimming would lower the sensitivity only
  for a trimmed statistic, which this does not release. Negative outputs are clamped (post-processing).
"""

from __future__ import annotations

import numpy as np

from .bounded import BoundedGaussianNB
from .noise import noisy_histogram

CAUCHY_FACTOR = 6.0  # 2(γ + 1) with γ = 2


def smooth_bound(n: int, width: float, beta: float, power: float) -> float:
    """``max_k e^{−βk} · width / max(n − k, 1)^power`` over k = 0 … n: the β-smooth sensitivity
    bound of a class statistic whose local sensitivity at class size m is ``width / m^power``."""
    k = np.arange(n + 1)
    sizes = np.maximum(n - k, 1).astype(float)
    return float((np.exp(-beta * k) * width / sizes**power).max())


class SmoothSensitivityNB(BoundedGaussianNB):
    def fit(self, X: np.ndarray, y: np.ndarray) -> SmoothSensitivityNB:
        X = self.prepare(X)
        eps, k = self.epsilon_per_query, self.n_classes
        counts = np.bincount(y, minlength=k)
        noisy = noisy_histogram(counts, eps, self.rng)
        self.class_prior_ = noisy / noisy.sum()
        widths = self.bounds[:, 1] - self.bounds[:, 0]
        self.theta_ = np.zeros((k, len(widths)))
        sigma_ = np.zeros((k, len(widths)))
        for c in range(k):
            rows = X[y == c]
            mean = rows.mean(axis=0) if len(rows) else self.bounds.mean(axis=1)
            sigma = rows.std(axis=0) if len(rows) else widths / 2
            if eps is not None:
                eps_q = eps / 2
                beta = eps_q / CAUCHY_FACTOR
                for j, width in enumerate(widths):
                    s_mean = smooth_bound(len(rows), width, beta, 1.0)
                    s_sigma = smooth_bound(len(rows), width, beta, 0.5)
                    mean[j] += CAUCHY_FACTOR * s_mean / eps_q * self.rng.standard_cauchy()
                    sigma[j] += CAUCHY_FACTOR * s_sigma / eps_q * self.rng.standard_cauchy()
            self.theta_[c] = np.clip(mean, self.bounds[:, 0], self.bounds[:, 1])
            sigma_[c] = np.clip(sigma, 1e-3 * widths, widths / 2)
        self.var_ = sigma_**2
        return self
