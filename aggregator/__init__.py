"""The aggregator: accumulates reports into sufficient statistics and assembles the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from participant.extras import require_extra
from participant.lazy import lazy_exports

require_extra("aggregator", "aggregator", ["scipy", "sklearn", "sqlite_utils", "asyncpg", "prometheus_client", "tqdm"])

# The extra is there. The public names are imported on first use (PEP 562), so that a command
# which only parses its options loads neither scipy nor scikit-learn.
_HOMES = {
    ".estimators": ("ESTIMATORS", "build_model", "model_from_dict", "normsub_estimator", "paper_estimator"),
    ".model": ("NaiveBayesModel",),
    ".simplex": ("project_to_simplex",),
    ".statistics": ("CollectionStatistics",),
}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .estimators import ESTIMATORS, build_model, model_from_dict, normsub_estimator, paper_estimator
    from .model import NaiveBayesModel
    from .simplex import project_to_simplex
    from .statistics import CollectionStatistics

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
