import ctypes
import fcntl
import itertools
import os
import signal
import subprocess

import numpy as np
import pytest

from participant import CollectionSpec, Feature

# Table 1 of the paper: (age, income, gender, missed payment).
TABLE_1 = [
    ("Young", "Low", "Male", "Yes"),
    ("Young", "High", "Female", "Yes"),
    ("Medium", "High", "Male", "No"),
    ("Old", "Medium", "Male", "No"),
    ("Old", "High", "Male", "No"),
    ("Old", "Low", "Female", "Yes"),
    ("Medium", "Low", "Female", "No"),
    ("Medium", "Medium", "Male", "Yes"),
    ("Young", "Low", "Male", "No"),
    ("Old", "High", "Female", "No"),
]


def skewed_class_independent(people_per_input: int):
    """The reviewer's population for a false class signal: one feature of 64 values, geometric
    (half its people on 6 values) and independent of the class, a fifth of the people in class b,
    OUE at ε = 1. Returns the true model and empty statistics with ``people_per_input`` reports
    on each input, for :func:`aggregator.estimation.bootstrap.draw_statistics`."""
    from aggregator.estimation.model import NaiveBayesModel
    from aggregator.estimation.statistics import CollectionStatistics

    d = 64
    spec = CollectionSpec([Feature("f", [f"v{j}" for j in range(d)])], ["a", "b"], "OUE", 1.0)
    marginal = np.exp(-np.arange(d) / 8.0)
    prior = np.array([0.8, 0.2])
    truth = NaiveBayesModel(spec, prior * 1e9, [np.outer(prior, marginal / marginal.sum()) * 1e9])
    like = CollectionStatistics(spec)
    for state in like.states:
        state.n = people_per_input
    return truth, like


def table_1_spec(protocol="DE", epsilon=1.0, **kwargs) -> CollectionSpec:
    """The paper's example: classes C1 = missed a payment (Yes), C2 = did not (No)."""
    return CollectionSpec(
        features=[
            Feature("age", ["Young", "Medium", "Old"]),
            Feature("income", ["Low", "Medium", "High"]),
            Feature("gender", ["Male", "Female"]),
        ],
        classes=["Yes", "No"],
        protocol=protocol,
        epsilon=epsilon,
        label="missed_payment",
        **kwargs,
    )


@pytest.fixture
def spec():
    return table_1_spec()


# Databases: every service test runs on SQLite and on a real PostgreSQL that the suite starts
# itself (the pgserver wheel's binaries, in a temporary directory), one fresh database per test.


def pytest_configure(config):
    # A run stopped by a timeout's SIGTERM tears down like Ctrl-C: every fixture and finally block
    # stops what it started (servers, PostgreSQL), instead of the process vanishing around them.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker whose controller is gone (killed, or stopped before it could stop its workers)
        # gets the same SIGTERM, so that it too stops what it started.
        from .postgres import PR_SET_PDEATHSIG

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def pytest_sessionstart(session):
    # Many tests replay the paper's data sets, which ship inside the package: an install that lost
    # them gets one line before anything runs, not a failure per test.
    from sim.datasets import DATASETS, DatasetNotFound, find_data_file

    for info in DATASETS.values():
        try:
            find_data_file(info)
        except DatasetNotFound as exc:
            pytest.exit(f"the tests replay the paper's data sets: {exc}", returncode=2)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session (:class:`tests.postgres.PostgreSQL`)."""
    from .postgres import PostgreSQL, server_directory

    with server_directory("postgres") as directory:
        server = PostgreSQL(directory).start()
        yield server
        server.stop("fast")


_databases = itertools.count()


def fresh_postgres_url(server) -> str:
    """A new, empty database on ``server``; its URL."""
    return server.create_database(f"ldpnb_test_{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path):
    """A database for one test: a SQLite path or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "aggregator.sqlite3")
    return fresh_postgres_url(request.getfixturevalue("postgres"))


# The JavaScript participant, installed from its lock file and compiled once per session.

JS_ROOT = os.path.join(os.path.dirname(__file__), "..", "participant-js")


@pytest.fixture(scope="session")
def built(testrun_uid):
    """participant-js installed from its lock file (``npm ci``) and compiled once per run, whichever
    of the run's worker processes asks first (the others wait on the lock and find it built: a
    second build would rewrite files a first worker's tests are reading); its directory."""
    from .postgres import die_with_parent

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            command, cwd=JS_ROOT, capture_output=True, text=True, timeout=300, preexec_fn=die_with_parent
        )

    with open(os.path.join(JS_ROOT, ".build.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        if lock.read() == testrun_uid:
            return JS_ROOT
        if not os.path.isdir(os.path.join(JS_ROOT, "node_modules")):
            installed = run("npm", "ci", "--no-audit", "--no-fund")
            assert installed.returncode == 0, installed.stderr[-3000:]
        compiled = run("npm", "run", "build")  # tsc, and the single-file browser build the survey page loads
        assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
        lock.seek(0)
        lock.truncate()
        lock.write(testrun_uid)
    return JS_ROOT
