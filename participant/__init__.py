"""The library an app embeds: read a collection's spec, encode a record, send one randomised report.

Each person spends the collection's ε once: exactly one report per person per collection. The
public API an app needs:

- :class:`Client` (synchronous) and :class:`AsyncClient`: ``submit(collection_id, record)`` sends
  this device's one report, keeping a :class:`Ledger` so that no second report is ever drawn, within
  the app's :class:`Limits` (``max_epsilon`` per collection, a :class:`Budget` for the device, the
  sizes and times a service may ask for) that no service can raise;
- the errors, all :class:`ParticipantError`: :class:`AlreadyReported` (this device reported
  already; nothing sent), :class:`CollectionChanged` (the service changed a collection this device
  reported to; nothing sent), :class:`BudgetExceeded` (over the app's ε limits; nothing drawn or
  sent), :class:`LimitExceeded` (a spec or answer over the app's size and time limits; nothing
  drawn or sent), :class:`ReportRejected` (the service refused it), :class:`SubmissionFailed`
  (unreachable; the report stays pending and is re-sent unchanged), :class:`LedgerError` (the
  ledger cannot be read or written; nothing sent), :class:`RecordError` and :class:`SpecError`
  (raised before anything is randomised or sent);
- :class:`Participant` and :class:`CollectionSpec`, to build a report without the network.

Everything here needs only the core install (numpy, msgpack, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

# Where each public name lives. Imported on first use (PEP 562): a command that only reads a spec
# does not load aiohttp, and `--help` answers at once.
_HOMES = {
    ".client": ("AsyncClient", "Client", "Published"),
    ".encoding": (
        "encode_features", "encode_labels", "encode_record", "input_values", "joint_decode", "joint_encode",
        "population_inputs",
    ),
    ".errors": (
        "AlreadyReported", "BudgetExceeded", "ClientError", "CollectionChanged", "LedgerError", "LimitExceeded",
        "ParticipantError", "RecordError", "ReportRejected", "SpecError", "SubmissionFailed", "UnknownFields",
        "UnknownValues",
    ),
    ".ledger": ("Ledger",),
    ".limits": ("Budget", "Limits"),
    ".randomness": ("SecureGenerator",),
    ".reporting": ("Participant", "PerturbedInputs", "Report", "choose_inputs", "perturb_population"),
    ".spec": ("CollectionSpec", "Feature"),
}  # fmt: skip
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .client import AsyncClient, Client, Published
    from .encoding import (
        encode_features,
        encode_labels,
        encode_record,
        input_values,
        joint_decode,
        joint_encode,
        population_inputs,
    )
    from .errors import (
        AlreadyReported,
        BudgetExceeded,
        ClientError,
        CollectionChanged,
        LedgerError,
        LimitExceeded,
        ParticipantError,
        RecordError,
        ReportRejected,
        SpecError,
        SubmissionFailed,
        UnknownFields,
        UnknownValues,
    )
    from .ledger import Ledger
    from .limits import Budget, Limits
    from .randomness import SecureGenerator
    from .reporting import Participant, PerturbedInputs, Report, choose_inputs, perturb_population
    from .spec import CollectionSpec, Feature  # fmt: skip

__all__ = [
    "AlreadyReported",
    "AsyncClient",
    "Budget",
    "BudgetExceeded",
    "CollectionChanged",
    "Limits",
    "Client",
    "ClientError",
    "Ledger",
    "LedgerError",
    "LimitExceeded",
    "ParticipantError",
    "Published",
    "ReportRejected",
    "SubmissionFailed",
    "CollectionSpec",
    "Feature",
    "Participant",
    "PerturbedInputs",
    "RecordError",
    "UnknownFields",
    "UnknownValues",
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
