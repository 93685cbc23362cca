"""The aggregator: accumulates reports into sufficient statistics and assembles the model."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from participant.extras import require_extra

require_extra("aggregator", "aggregator", ["scipy", "sklearn", "sqlite_utils", "asyncpg", "prometheus_client", "tqdm"])

# The extra is there. The public names are imported on first use (PEP 562), so that a command
# which only parses its options loads neither scipy nor scikit-learn.
_HOMES = {
    ".estimators": ("ESTIMATORS", "build_model", "model_from_dict", "normsub_estimator", "paper_estimator"),
    ".model": ("NaiveBayesModel",),
    ".simplex": ("project_to_simplex",),
    ".statistics": ("CollectionStatistics",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME_OF[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])


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
