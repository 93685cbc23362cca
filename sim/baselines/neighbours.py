"""ε-DP radius-neighbours classification with a trusted curator (dp-nearest-neighbors.txt,
Algorithm 3), on categorical records with the Hamming distance. The test points are not protected.

Each test point x_i asks for the label counts of the training rows within radius r. Balls that
intersect form the region overlap graph; its connected components are answered independently
(parallel composition), each with the whole ε. Inside a component, one training row lies in at
most MCS of the balls (a set of balls with a common point is a clique), so the component's count
vectors change by at most MCS per label; under replacement adjacency a row can leave MCS balls
and enter MCS others, so every count takes Laplace(2·MCS/ε) noise and the label of largest noisy
count is returned. The maximum clique size is NP-hard to compute; any upper bound keeps the
guarantee, and this uses the graph's degeneracy + 1 (exact for many graphs, never smaller).

For the Hamming distance, balls of radii r_i and r_j around x_i and x_j intersect iff
d(x_i, x_j) <= r_i + r_j (change r_i of the differing attributes of x_i to x_j's values).

k-NN (:class:`DPKNearestNeighbours`) converts each test point's k to a radius with part ``w·ε``
of the budget (the paper's interactive conversion, Algorithm 6), then classifies the radius
neighbours with ``(1 − w)·ε``. The paper leaves the utility and the treatment of |D| open; here:
adjacency is replacement, so |D| is public; the uniform-density radius r_UNIF is the smallest r
whose Hamming ball is expected to hold k of |D| uniformly spread records; the candidates are the
integer radii 0 … 2·r_UNIF; the utility of r is ``−|c(x, r) − k|`` (c: training rows within r),
whose sensitivity is 1; each test point's exponential mechanism gets ``w·ε/|X|`` (sequential
composition over the test points, whose balls may share rows).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from .decision_tree import one_hot
from .noise import HISTOGRAM_SENSITIVITY


def hamming(A: np.ndarray, B: np.ndarray, n_categories: list[int]) -> np.ndarray:
    """Pairwise Hamming distances between integer-coded records, shape (len(A), len(B))."""
    agree = one_hot(A, n_categories).astype(np.int32) @ one_hot(B, n_categories).astype(np.int32).T
    return A.shape[1] - agree


def degeneracy_bound(adjacency: np.ndarray) -> int:
    """degeneracy + 1 of a graph (boolean adjacency, no self loops): an upper bound on its
    clique number, found by repeatedly removing a vertex of least remaining degree."""
    alive = np.ones(len(adjacency), dtype=bool)
    degree = adjacency.sum(axis=1).astype(np.int64)
    best = 0
    for _ in range(len(adjacency)):
        v = int(np.argmin(np.where(alive, degree, np.iinfo(np.int64).max)))
        best = max(best, int(degree[v]))
        alive[v] = False
        degree -= adjacency[v]
    return best + 1


class DPRadiusNeighbours:
    """``radius``: one Hamming radius for every test point, or one per test point (an array)."""

    def __init__(self, epsilon: float | None, n_categories: list[int], n_classes: int, radius, rng=None):
        self.epsilon = epsilon
        self.n_categories = list(n_categories)
        self.n_classes = n_classes
        self.radius = radius
        self.rng = np.random.default_rng(rng)

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPRadiusNeighbours:
        self.X_, self.y_ = X, y
        return self

    def predict(self, X: np.ndarray, radius=None) -> np.ndarray:
        radius = np.broadcast_to(np.asarray(self.radius if radius is None else radius), (len(X),))
        within = hamming(X, self.X_, self.n_categories) <= radius[:, None]
        counts = within.astype(np.int64) @ np.eye(self.n_classes, dtype=np.int64)[self.y_]  # (m, k)
        if self.epsilon is not None:
            overlap = hamming(X, X, self.n_categories) <= radius[:, None] + radius[None, :]
            np.fill_diagonal(overlap, False)
            n_parts, part = connected_components(csr_matrix(overlap), directed=False)
            scale = np.empty(len(X))
            self.clique_bounds_ = {}
            for p in range(n_parts):
                members = np.flatnonzero(part == p)
                bound = degeneracy_bound(overlap[np.ix_(members, members)])
                self.clique_bounds_[p] = bound
                scale[members] = HISTOGRAM_SENSITIVITY * bound / self.epsilon
            counts = counts + self.rng.laplace(0.0, 1.0, counts.shape) * scale[:, None]
        return np.argmax(counts, axis=1)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))


def hamming_ball_sizes(n_categories: list[int]) -> np.ndarray:
    """Number of records within Hamming distance r of any record, for r = 0 … n; shape (n + 1,)."""
    exact = np.array([1.0])  # polynomial: coefficient j counts records at distance exactly j
    for n_values in n_categories:
        exact = np.convolve(exact, [1.0, n_values - 1.0])
    return np.cumsum(exact)


class DPKNearestNeighbours:
    """k-NN through radius neighbours: per test point a radius from k (``weight·ε``), then
    :class:`DPRadiusNeighbours` with those radii (``(1 − weight)·ε``)."""

    def __init__(self, epsilon: float | None, n_categories: list[int], n_classes: int, k: int, weight=0.5, rng=None):
        self.epsilon = epsilon
        self.n_categories = list(n_categories)
        self.n_classes = n_classes
        self.k = k
        self.weight = weight
        self.rng = np.random.default_rng(rng)

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPKNearestNeighbours:
        self.X_, self.y_ = X, y
        return self

    def uniform_radius(self) -> int:
        """The smallest r whose ball holds k records in expectation if |D| were spread uniformly."""
        expected = len(self.X_) * hamming_ball_sizes(self.n_categories) / np.prod(np.array(self.n_categories, float))
        return int(np.argmax(expected >= self.k)) if (expected >= self.k).any() else len(self.n_categories)

    def radii(self, X: np.ndarray) -> np.ndarray:
        """Each test point's radius: the exponential mechanism over 0 … 2·r_UNIF, or without
        privacy the distance to the k-th nearest neighbour."""
        distances = hamming(X, self.X_, self.n_categories)
        if self.epsilon is None:
            return np.sort(distances, axis=1)[:, self.k - 1]
        candidates = np.arange(min(2 * max(self.uniform_radius(), 1), len(self.n_categories)) + 1)
        counts = (distances[:, :, None] <= candidates).sum(axis=1)  # (m, candidates)
        utility = -np.abs(counts - self.k)
        per_point = self.weight * self.epsilon / len(X)
        logits = per_point * utility / 2.0
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        draws = (probabilities.cumsum(axis=1) < self.rng.random((len(X), 1))).sum(axis=1)
        return candidates[np.minimum(draws, len(candidates) - 1)]

    def predict(self, X: np.ndarray) -> np.ndarray:
        radii = self.radii(X)
        classify_eps = None if self.epsilon is None else (1 - self.weight) * self.epsilon
        neighbours = DPRadiusNeighbours(classify_eps, self.n_categories, self.n_classes, radii, rng=self.rng)
        return neighbours.fit(self.X_, self.y_).predict(X)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))
