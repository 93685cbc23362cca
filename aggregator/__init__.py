"""The aggregator: accumulates reports into sufficient statistics and assembles the model.

Four packages, each importing only those before it:

- :mod:`aggregator.estimation`: statistics, estimators and the model (no I/O);
- :mod:`aggregator.store`: durable storage, one interface and two implementations (SQLite,
  PostgreSQL), and why exactly once holds;
- :mod:`aggregator.service`: the HTTP service;
- :mod:`aggregator.operator`: the command line, ``python -m aggregator``.

The names a researcher needs (``build_model``, ``CollectionStatistics``, ``NaiveBayesModel``, ...)
are importable from ``aggregator`` itself. Imports: ``protocols`` and ``participant`` below it;
never ``sim`` or ``bench`` above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from participant.extras import require_extra
from participant.lazy import lazy_exports

require_extra("aggregator", "aggregator", ["scipy", "sklearn", "asyncpg", "prometheus_client", "tqdm", "cryptography"])

# The extra is there. The public names are imported on first use (PEP 562), so that a command
# which only parses its options loads neither scipy nor scikit-learn.
_HOMES = {
    ".estimation.estimators": ("ESTIMATORS", "build_model", "model_from_dict", "normsub_estimator", "paper_estimator"),
    ".estimation.model": ("NaiveBayesModel",),
    ".estimation.simplex": ("project_to_simplex",),
    ".estimation.statistics": ("CollectionStatistics",),
}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .estimation.estimators import ESTIMATORS, build_model, model_from_dict, normsub_estimator, paper_estimator
    from .estimation.model import NaiveBayesModel
    from .estimation.simplex import project_to_simplex
    from .estimation.statistics import CollectionStatistics

__all__ = [
    "ESTIMATORS",
    "CollectionStatistics",
    "NaiveBayesModel",
    "build_model",
    "model_from_dict",
    "normsub_estimator",
    "paper_estimator",
    "project_to_simplex",
]
