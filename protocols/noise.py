"""Noise samplers built only on ``rng.random``, so a secure uniform source can drive them."""

from __future__ import annotations

import numpy as np


def laplace(rng, scale: float, size) -> np.ndarray:
    """Samples of Laplace(0, ``scale``) with the given ``size``; float64.

    A Laplace variable is an exponential one with a random sign. The exponential is
    ``-log(1 - U)`` with ``U`` in [0, 1), which is never infinite.
    """
    magnitude = -np.log1p(-rng.random(size))
    sign = np.where(rng.random(size) < 0.5, -scale, scale)
    return magnitude * sign


def laplace_log_density(x, scale: float) -> np.ndarray:
    """Elementwise log density of Laplace(0, ``scale``) at ``x``."""
    return -np.log(2.0 * scale) - np.abs(x) / scale
