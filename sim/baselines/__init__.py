"""Central-DP classifiers from the companion papers, for comparison with LDP Naive Bayes.

A trusted curator holds the raw data and releases a model under ε-DP. These live with the
simulator: they are not part of the participant library or the service.
"""

from .decision_tree import DPDecisionTree
from .gaussian_nb import DPGaussianNB
from .naive_bayes import DPNaiveBayes
from .neighbours import DPKNearestNeighbours, DPRadiusNeighbours
from .smooth_nb import SmoothSensitivityNB
from .svm import DPSVM

__all__ = [
    "DPSVM",
    "DPDecisionTree",
    "DPGaussianNB",
    "DPKNearestNeighbours",
    "DPNaiveBayes",
    "DPRadiusNeighbours",
    "SmoothSensitivityNB",
]
