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

For the Hamming distance, balls of radius r around x_i and x_j intersect iff d(x_i, x_j) <= 2r
(change r of the differing attributes of x_i to x_j's values). The paper's k-NN conversion
(choosing r privately from k) is not implemented yet: r is a parameter.
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
    def __init__(self, epsilon: float | None, n_categories: list[int], n_classes: int, radius: int, rng=None):
        self.epsilon = epsilon
        self.n_categories = list(n_categories)
        self.n_classes = n_classes
        self.radius = radius
        self.rng = np.random.default_rng(rng)

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPRadiusNeighbours:
        self.X_, self.y_ = X, y
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        within = hamming(X, self.X_, self.n_categories) <= self.radius
        counts = within.astype(np.int64) @ np.eye(self.n_classes, dtype=np.int64)[self.y_]  # (m, k)
        if self.epsilon is not None:
            overlap = hamming(X, X, self.n_categories) <= 2 * self.radius
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
