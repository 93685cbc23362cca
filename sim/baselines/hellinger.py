"""Differentially private Beta posteriors: the smoothed-Hellinger exponential mechanism of
dp-bayesian-inference-hellinger.txt against the Laplace baseline, for a binary attribute (the
Beta-Binomial model; with the class as the attribute, a private class prior).

Data: n binary values with ``a`` ones; prior beta(α, β); posterior beta(α + a, β + n − a). The
candidates are the n + 1 posteriors beta(α + a', β + n − a'), so a release is a count a'.

- Exponential mechanism: Pr[a'] ∝ exp(−ε·H(post(a), post(a')) / (2·S(a))), with H the Hellinger
  distance and S the smooth sensitivity ``max_{a''} LS(a'')·e^{−γ|a − a''|}``, where LS(a'') is the
  largest change of H(post(·), r) over all candidates r when one row of a data set with a'' ones
  is replaced (a'' ± 1), and ``γ = ln(1 − ε / (2 ln(δ / (2(n+1)))))``. (ε, δ)-DP.
- Laplace baseline: a' = a + Lap(sensitivity/ε), rounded to the nearest integer and clamped to
  [0, n]; sensitivity 1 (a two-bin histogram under replacement moves one count of the pair) or 2
  (the "proportional to dimensionality" variant the poster also plots). ε-DP.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import betaln


def hellinger_beta(a1, b1, a2, b2) -> np.ndarray:
    """Hellinger distance between beta(a1, b1) and beta(a2, b2) (elementwise)."""
    log_bc = betaln((a1 + a2) / 2, (b1 + b2) / 2) - (betaln(a1, b1) + betaln(a2, b2)) / 2
    return np.sqrt(np.clip(1 - np.exp(log_bc), 0.0, 1.0))


def distances(n: int, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """``D[a, a']``: Hellinger distance between the posteriors of counts a and a', (n+1, n+1)."""
    counts = np.arange(n + 1)
    a, b = alpha + counts, beta + n - counts
    return hellinger_beta(a[:, None], b[:, None], a[None, :], b[None, :])


def smoothing_gamma(epsilon: float, delta: float, n: int) -> float:
    return math.log(1 - epsilon / (2 * math.log(delta / (2 * (n + 1)))))


def smooth_sensitivity(D: np.ndarray, gamma: float) -> np.ndarray:
    """``S[a]`` for every count a, from the distance matrix ``D``."""
    n = D.shape[0] - 1
    change = np.abs(np.diff(D, axis=0)).max(axis=1)  # change[a] = max_r |D[a+1, r] − D[a, r]|
    local = np.zeros(n + 1)
    local[:-1] = change
    local[1:] = np.maximum(local[1:], change)  # LS(a) = max over the neighbours a − 1 and a + 1
    counts = np.arange(n + 1)
    return (local[None, :] * np.exp(-gamma * np.abs(counts[:, None] - counts[None, :]))).max(axis=1)


def exponential_mechanism_probabilities(
    a: int, n: int, epsilon: float, delta: float, alpha=1.0, beta=1.0
) -> np.ndarray:
    """Output distribution over counts a' of the smoothed-Hellinger mechanism, shape (n + 1,)."""
    D = distances(n, alpha, beta)
    S = smooth_sensitivity(D, smoothing_gamma(epsilon, delta, n))
    logits = -epsilon * D[a] / (2 * S[a])
    p = np.exp(logits - logits.max())
    return p / p.sum()


def laplace_probabilities(a: int, n: int, epsilon: float, sensitivity: float = 1.0) -> np.ndarray:
    """Output distribution of the rounded, clamped Laplace count, shape (n + 1,)."""
    scale = sensitivity / epsilon
    edges = np.arange(n + 2) - 0.5 - a  # rounding to a' covers [a' − ½, a' + ½)
    cdf = np.where(edges < 0, 0.5 * np.exp(edges / scale), 1 - 0.5 * np.exp(-edges / scale))
    cdf[0], cdf[-1] = 0.0, 1.0  # clamping puts both tails on 0 and n
    return np.diff(cdf)


def expected_distance(probabilities: np.ndarray, a: int, n: int, alpha=1.0, beta=1.0) -> float:
    """Mean Hellinger distance between the released and the true posterior."""
    return float(probabilities @ distances(n, alpha, beta)[a])


# Dirichlet posteriors (k categories, e.g. a class prior with k classes).
#
# For k >= 3 the local sensitivity over all candidates is too costly to compute exactly; the
# Hellinger distance is a metric, so |H(p, r) − H(q, r)| <= H(p, q), and the largest distance from
# a data set's posterior to an adjacent one's bounds its local sensitivity. Smoothing that bound
# (max over data sets of bound·e^{−γ·distance}) gives a valid smooth upper bound, at the price of
# some extra noise. Adjacent data sets move one count from one category to another (replacement),
# and the distance between data sets with count vectors a and b is ½‖a − b‖₁.


def compositions(n: int, k: int) -> np.ndarray:
    """Every count vector of k non-negative integers summing to n, shape (C, k); k = 2 or 3."""
    if k == 2:
        a = np.arange(n + 1)
        return np.column_stack([a, n - a])
    if k == 3:
        a, b = np.triu_indices(n + 1)
        return np.column_stack([a, b - a, n - b])
    raise ValueError("compositions are enumerated for k = 2 or 3 (k = 4 at n = 600 would be 36 million)")


def log_multivariate_beta(alpha: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln

    return gammaln(alpha).sum(axis=-1) - gammaln(alpha.sum(axis=-1))


def hellinger_dirichlet(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Hellinger distance between Dirichlet(alpha) and Dirichlet(beta) (broadcast over rows)."""
    log_bc = (
        log_multivariate_beta((alpha + beta) / 2) - (log_multivariate_beta(alpha) + log_multivariate_beta(beta)) / 2
    )
    return np.sqrt(np.clip(1 - np.exp(log_bc), 0.0, 1.0))


def dirichlet_mechanism_probabilities(
    counts, epsilon: float, delta: float, prior=None
) -> tuple[np.ndarray, np.ndarray]:
    """``(candidates, probabilities)`` of the smoothed-Hellinger mechanism for a Dirichlet posterior."""
    counts = np.asarray(counts)
    k, n = len(counts), int(counts.sum())
    prior = np.ones(k) if prior is None else np.asarray(prior, float)
    cands = compositions(n, k)
    post = prior + cands
    # Bound on the local sensitivity at every candidate data set: the largest distance to a
    # posterior one replaced row away (one unit moved between two categories).
    bound = np.zeros(len(cands))
    for i in range(k):
        for j in range(k):
            if i != j:
                moved = post.copy()
                moved[:, i] -= 1
                moved[:, j] += 1
                ok = cands[:, i] > 0
                bound[ok] = np.maximum(bound[ok], hellinger_dirichlet(post[ok], moved[ok]))
    gamma = smoothing_gamma(epsilon, delta, n)
    distance = np.abs(cands - counts).sum(axis=1) / 2
    smooth = (bound * np.exp(-gamma * distance)).max()
    scores = hellinger_dirichlet(prior + counts, post)
    logits = -epsilon * scores / (2 * smooth)
    p = np.exp(logits - logits.max())
    return cands, p / p.sum()


def dirichlet_laplace_samples(counts, epsilon: float, sensitivity: float, samples: int, rng) -> np.ndarray:
    """Released count vectors of the Laplace baseline: each count plus Lap(sensitivity/ε), rounded
    and clamped at 0; shape (samples, k)."""
    counts = np.asarray(counts, float)
    noisy = counts + rng.laplace(0, sensitivity / epsilon, (samples, len(counts)))
    return np.maximum(np.rint(noisy), 0)
