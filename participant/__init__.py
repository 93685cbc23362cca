"""The library an app embeds: read a collection's spec, encode a record, send one randomised report.

Each person spends the collection's ε once: exactly one report per person per collection.
"""

from .encoding import (
    encode_features,
    encode_labels,
    encode_record,
    input_values,
    joint_decode,
    joint_encode,
    population_inputs,
)
from .errors import RecordError, SpecError
from .randomness import SecureGenerator
from .reporting import Participant, PerturbedInputs, Report, choose_inputs, perturb_population
from .spec import CollectionSpec, Feature

__all__ = [
    "CollectionSpec",
    "Feature",
    "Participant",
    "PerturbedInputs",
    "RecordError",
    "Report",
    "SecureGenerator",
    "SpecError",
    "choose_inputs",
    "encode_features",
    "encode_labels",
    "encode_record",
    "input_values",
    "joint_decode",
    "joint_encode",
    "perturb_population",
    "population_inputs",
]
