"""``import ldpnb`` gives what a user imports, each name the very object of the package that holds it."""

from __future__ import annotations

import subprocess
import sys

import aggregator.operator.specdraft
import participant
import sim.estimator
from participant import client, errors, limits, spec

EXPECTED = {
    "LDPNaiveBayes": sim.estimator.LDPNaiveBayes,
    "draft_spec": aggregator.operator.specdraft.draft_spec,
    "DraftNote": aggregator.operator.specdraft.DraftNote,
    "CollectionSpec": spec.CollectionSpec,
    "Feature": spec.Feature,
    "Client": client.Client,
    "AsyncClient": client.AsyncClient,
    "Limits": limits.Limits,
    "Budget": limits.Budget,
}


def test_ldpnb_exposes_the_users_names_as_the_same_objects():
    import ldpnb

    for name, value in EXPECTED.items():
        assert getattr(ldpnb, name) is value, name
    # Every error participant exports, the same classes.
    for name in ("ParticipantError", "ClientError", "RecordError", "SpecError", "AlreadyReported", "BudgetExceeded",
                 "LimitExceeded", "CollectionChanged", "ReportRejected", "SubmissionFailed", "LedgerError",
                 "UnknownFields", "UnknownValues"):  # fmt: skip
        assert getattr(ldpnb, name) is getattr(errors, name) is getattr(participant, name), name
    assert set(EXPECTED) <= set(ldpnb.__all__) <= set(dir(ldpnb))
    assert ldpnb.__doc__ and "LDPNaiveBayes" in ldpnb.__doc__
    from ldpnb import Client, LDPNaiveBayes  # noqa: F401  (as a user writes it)


def test_importing_ldpnb_loads_no_extra_until_a_name_needs_it():
    """A device's ``from ldpnb import Client`` loads neither scikit-learn nor pandas."""
    code = "import sys, ldpnb; from ldpnb import Client, CollectionSpec; print(sorted({'sklearn', 'pandas', 'scipy', 'sim'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
