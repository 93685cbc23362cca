"""ε-DP CART with a trusted curator: Algorithm 3 of comparing-dp-classifiers.txt.

Attributes are binary (each category of each feature one-hot, as CART there requires); the tree
grows to depth ``d = ceil(sqrt(|A|))``. At an interior node every attribute not yet on the path
gets a noisy (value, class) histogram, clamped positive, and the attribute of least noisy Gini
index splits the node; a leaf takes the class of largest noisy count. Each row is in one node per
level and, there, in one histogram per attribute: ``ε' = ε / (|A|·(d + 1))``, and every histogram
takes Laplace(2/ε') per cell (replacement adjacency, see :mod:`sim.baselines.noise`). With
``epsilon=None`` the same tree is grown from exact counts: the non-private counterpart.
"""

from __future__ import annotations

import math

import numpy as np

from .noise import noisy_histogram


def one_hot(X: np.ndarray, n_categories: list[int]) -> np.ndarray:
    """Binary attributes ``(m, Σ n_i)``: column ``offset_i + v`` is ``X[:, i] == v``."""
    offsets = np.concatenate([[0], np.cumsum(n_categories)])
    B = np.zeros((len(X), offsets[-1]), dtype=bool)
    B[np.arange(len(X))[:, None], X + offsets[:-1]] = True
    return B


class DPDecisionTree:
    def __init__(
        self, epsilon: float | None, n_categories: list[int], n_classes: int, depth: int | None = None, rng=None
    ):
        self.epsilon = epsilon
        self.n_categories = list(n_categories)
        self.n_classes = n_classes
        self.n_attributes = int(sum(n_categories))
        self.depth = depth if depth is not None else math.ceil(math.sqrt(self.n_attributes))
        self.rng = np.random.default_rng(rng)

    @property
    def epsilon_per_query(self) -> float | None:
        """``ε' = ε / (|A|·(d + 1))``."""
        return None if self.epsilon is None else self.epsilon / (self.n_attributes * (self.depth + 1))

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPDecisionTree:
        B, k, eps = one_hot(X, self.n_categories), self.n_classes, self.epsilon_per_query
        labels = np.eye(k, dtype=np.int64)[y]
        # Nodes in breadth-first order: split attribute (-1 for a leaf), children, leaf label.
        self.split_, self.children_, self.label_ = [], [], []
        frontier = [(np.arange(len(y)), 0, np.zeros(self.n_attributes, dtype=bool))]
        while frontier:
            nxt = []
            for rows, depth, used in frontier:
                node = len(self.split_)
                self.split_.append(-1)
                self.children_.append([-1, -1])
                if depth == self.depth or used.all():
                    counts = noisy_histogram(labels[rows].sum(axis=0), eps, self.rng, positive=False)
                    self.label_.append(int(np.argmax(counts)))
                    continue
                self.label_.append(-1)
                ones = B[rows].T.astype(np.int64) @ labels[rows]  # (|A|, k): rows with A = 1, by class
                zeros = labels[rows].sum(axis=0) - ones
                m = noisy_histogram(np.stack([zeros, ones], axis=1), eps, self.rng)  # (|A|, 2, k)
                totals = m.sum(axis=2)  # (|A|, 2)
                gini = (((totals**2 - (m**2).sum(axis=2)) / totals).sum(axis=1)) / totals.sum(axis=1)
                gini[used] = np.inf
                attribute = int(np.argmin(gini))
                self.split_[node] = attribute
                child_used = used.copy()
                child_used[attribute] = True
                go = B[rows, attribute]
                for side in (0, 1):
                    self.children_[node][side] = -1  # filled when the child is created
                    nxt.append((rows[go == side], depth + 1, child_used, node, side))
            frontier = []
            for rows, depth, used, parent, side in nxt:
                self.children_[parent][side] = len(self.split_) + len(frontier)
                frontier.append((rows, depth, used))
        self.split_ = np.array(self.split_)
        self.children_ = np.array(self.children_)
        self.label_ = np.array(self.label_)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        B = one_hot(X, self.n_categories)
        node = np.zeros(len(X), dtype=np.int64)
        for _ in range(self.depth + 1):
            interior = self.split_[node] >= 0
            if not interior.any():
                break
            rows = np.flatnonzero(interior)
            go = B[rows, self.split_[node[rows]]].astype(np.int64)
            node[rows] = self.children_[node[rows], go]
        return self.label_[node]

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))
