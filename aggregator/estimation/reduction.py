"""Fitting the projection a collection publishes: PCA or DCA on an operator's reference sample.

The reference sample must not be the people then surveyed: a projection fitted on them, and the
ranges it declares, reveal something about them outside the LDP guarantee. Use a public sample, a
pilot with its own consent, or data from an earlier period.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh
from sklearn.decomposition import PCA

from participant.continuous import ContinuousFeature, Projection, clip_and_normalise


def dca_directions(X: np.ndarray, y: np.ndarray, components: int, ridge: float = 1e-3) -> np.ndarray:
    """Discriminant component analysis (Kung 2014): the leading generalised eigenvectors of the
    between-class scatter against the within-class scatter, each regularised by ``ridge·I``
    (relative to the mean within-class variance).

    With the ridge in both, every component is defined, beyond the k - 1 of Fisher's LDA: after
    the discriminant directions come those of least within-class spread. Returns ``(components,
    p)`` rows of unit length.
    """
    X = np.asarray(X, dtype=float)
    mean = X.mean(axis=0)
    p = X.shape[1]
    between = np.zeros((p, p))
    within = np.zeros((p, p))
    for c in np.unique(y):
        Xc = X[y == c]
        d = Xc.mean(axis=0) - mean
        between += len(Xc) * np.outer(d, d)
        centred = Xc - Xc.mean(axis=0)
        within += centred.T @ centred
    rho = ridge * np.trace(within) / p
    values, vectors = eigh(between + rho * np.eye(p), within + rho * np.eye(p))
    order = np.argsort(values)[::-1][:components]
    directions = vectors[:, order].T
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


def fit_projection(
    method: str,
    X_reference,
    y_reference,
    inputs: tuple[ContinuousFeature, ...],
    components: int,
    ranges: str = "reference",
) -> Projection:
    """A :class:`Projection` of ``method`` ("pca" or "dca") fitted on a reference sample of raw
    records (clipped and normalised with the declared ``inputs`` ranges first).

    The projected coordinates' declared ranges are the reference sample's projected minimum and
    maximum (``ranges="reference"``) or the image of the whole declared input box
    (``ranges="box"``: wider, but free of any sample).
    """
    Xn = clip_and_normalise(np.asarray(X_reference, dtype=float), inputs)
    if not 1 <= components <= Xn.shape[1]:
        raise ValueError(f"components must lie in [1, {Xn.shape[1]}], got {components}")
    if method == "pca":
        pca = PCA(n_components=components).fit(Xn)
        matrix, center = pca.components_, pca.mean_
    elif method == "dca":
        matrix, center = dca_directions(Xn, np.asarray(y_reference), components), Xn.mean(axis=0)
    else:
        raise ValueError(f"unknown projection method {method!r}; choose pca or dca")
    if ranges == "reference":
        Z = (Xn - center) @ matrix.T
        low, high = Z.min(axis=0), Z.max(axis=0)
    elif ranges == "box":
        # Over x in [-1, 1]^p, w·(x - c) spans ±Σ|w_i| shifted by -w·c.
        spread, shift = np.abs(matrix).sum(axis=1), matrix @ center
        low, high = -spread - shift, spread - shift
    else:
        raise ValueError(f"ranges must be 'reference' or 'box', got {ranges!r}")
    outputs = tuple(
        ContinuousFeature(f"{method}{j + 1}", float(lo), float(hi)) for j, (lo, hi) in enumerate(zip(low, high))
    )
    return Projection(tuple(map(tuple, matrix)), tuple(center), outputs, method)
