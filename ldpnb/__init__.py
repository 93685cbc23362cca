"""ldpnb: what a user imports, in one place. Each name is the very object of the package that
holds it, which stays where it is; this package only gathers them, and nothing else imports it.

- An app on a device (the core install: numpy, msgpack, aiohttp): :class:`Client` and
  :class:`AsyncClient` send a person's one report, within the app's :class:`Limits` and
  :class:`Budget`; :class:`CollectionSpec` and :class:`Feature` describe a collection; the errors
  (:class:`ParticipantError` and those under it) say what was refused (from :mod:`participant`).
- A data scientist (``pip install 'ldpnb[sim]'``): :class:`LDPNaiveBayes`, scikit-learn's
  classifier fitted by simulating the LDP collection of its training rows (:mod:`sim.estimator`),
  and :func:`draft_spec`, a collection spec drafted from a pandas DataFrame, with
  :class:`DraftNote`, the warning of what the sample could not decide
  (:mod:`aggregator.operator.specdraft`; ``pip install 'ldpnb[aggregator]'``).

Each name is imported on first use (PEP 562): ``from ldpnb import Client`` needs the core install
alone, and a name whose extra is missing raises ``ModuleNotFoundError`` naming the ``pip install``.

Imports: ``participant``, ``aggregator`` and ``sim`` (it sits above every package); nothing in the
project imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from participant.lazy import lazy_exports

_HOMES = {
    "participant.client": ("AsyncClient", "Client"),
    "participant.errors": (
        "AlreadyReported", "BudgetExceeded", "ClientError", "CollectionChanged", "LedgerError", "LimitExceeded",
        "ParticipantError", "RecordError", "ReportRejected", "SpecError", "SubmissionFailed", "UnknownFields",
        "UnknownValues",
    ),
    "participant.limits": ("Budget", "Limits"),
    "participant.spec": ("CollectionSpec", "Feature"),
    "aggregator.operator.specdraft": ("DraftNote", "draft_spec"),
    "sim.estimator": ("LDPNaiveBayes",),
}  # fmt: skip
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from aggregator.operator.specdraft import DraftNote, draft_spec
    from participant.client import AsyncClient, Client
    from participant.errors import (
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
    from participant.limits import Budget, Limits
    from participant.spec import CollectionSpec, Feature
    from sim.estimator import LDPNaiveBayes

__all__ = [
    "AlreadyReported",
    "AsyncClient",
    "Budget",
    "BudgetExceeded",
    "Client",
    "ClientError",
    "CollectionChanged",
    "CollectionSpec",
    "DraftNote",
    "Feature",
    "LDPNaiveBayes",
    "LedgerError",
    "LimitExceeded",
    "Limits",
    "ParticipantError",
    "RecordError",
    "ReportRejected",
    "SpecError",
    "SubmissionFailed",
    "UnknownFields",
    "UnknownValues",
    "draft_spec",
]
