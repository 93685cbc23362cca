"""The aggregator: accumulates reports into sufficient statistics and assembles the model."""

from participant.extras import require_extra

require_extra("aggregator", "aggregator", ["scipy", "sklearn", "sqlite_utils", "asyncpg", "prometheus_client", "tqdm"])

# The extra is there: the package's own imports follow.

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
