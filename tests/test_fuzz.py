"""Fuzzing: the report decoder and every endpoint of a real server must refuse bad input with a
4xx (or ReportError), never crash, and never count an invalid report."""

import asyncio
import threading
import urllib.request
from pathlib import Path

import msgpack
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from aggregator.service.app import create_app, open_store, start_site
from aggregator.service.keys import Config
from participant.wire import ReportError, decode_report, unpack

from .conftest import table_1_spec

ADMIN = "fuzz-admin-token-0123456789abc"
OPENAPI = Path(__file__).resolve().parents[1] / "aggregator" / "service" / "openapi.json"

# Anything msgpack can carry.
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
near_reports = st.fixed_dictionaries(
    {
        "id": st.binary(min_size=0, max_size=20),
        # The right digest for one of the three protocols under test, or bytes of any length.
        "spec": st.sampled_from([table_1_spec(protocol=p).fingerprint_digest for p in ("DE", "OUE", "SHE")])
        | st.binary(max_size=40),
        "input": st.integers(-3, 8) | st.booleans() | st.none(),
        "value": st.integers(-3, 100) | st.binary(max_size=70) | st.floats() | st.text(max_size=3),
    },
    optional={"extra": st.integers()},
)


@pytest.mark.parametrize("protocol", ["DE", "OUE", "SHE"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=values | near_reports)
def test_the_decoder_only_ever_accepts_valid_reports_or_raises_report_error(protocol, obj):
    spec = table_1_spec(protocol=protocol)
    try:
        report_id, input_index, row = decode_report(spec, obj)
    except ReportError as exc:
        assert exc.reason and str(exc)
        return
    assert isinstance(report_id, bytes) and len(report_id) == 16
    oracle = spec.oracles[input_index]
    if protocol == "DE":
        assert 0 <= int(row) < oracle.domain_size
    else:
        assert np.shape(row) == (oracle.domain_size,)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_unpacking_arbitrary_bytes_only_raises_report_error(body):
    try:
        unpack(body)
    except ReportError as exc:
        assert exc.reason == "malformed"


class ThreadedServer:
    """The real service, SQLite file and all, on a loopback port, served from its own thread."""

    def __init__(self, db_path):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store, _ = self.call(open_store(db_path, ADMIN))
        self.collection = self.call(self.store.create_collection("c1", table_1_spec(protocol="OUE"), 0))
        app = self.call(create_app(self.store, Config(max_body_bytes=64 * 1024, max_batch=100)))
        self.runner, self.url = self.call(start_site(app))
        self.app = app

    def call(self, coroutine):
        """Run ``coroutine`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def count_reports(self) -> int:
        return self.call(self.store.count_reports(self.collection))

    def counted(self) -> int:
        return self.call(self.store.statistics(self.collection)).n_reports

    def close(self):
        self.call(self.runner.cleanup())
        self.call(self.store.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ThreadedServer(tmp_path_factory.mktemp("fuzz") / "fuzz.sqlite3")
    yield server
    server.close()


def _packable(value):
    """``value`` with integers msgpack cannot carry (beyond 64 bits) turned into strings."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict):
        return {str(k): _packable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_packable(v) for v in value]
    return value


@schemathesis.serializer("application/msgpack")
def _msgpack(ctx, value):
    return msgpack.packb(_packable(value))


schema = schemathesis.openapi.from_path(OPENAPI)


@schema.parametrize()
@seed(20261123)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_endpoint_answers_5xx(case, server):
    for headers in ({"Authorization": f"Bearer {ADMIN}"}, {}):
        response = case.call(base_url=server.url, headers=headers, timeout=10)
        assert response.status_code < 500, (case.method, case.path, response.text)
        if response.status_code >= 400:
            assert "error" in response.json()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300) | (values | near_reports).map(lambda v: msgpack.packb(_packable(v))))
def test_random_report_bodies_are_refused_and_never_counted(server, body):
    before = server.count_reports()
    request = urllib.request.Request(
        f"{server.url}/collections/c1/reports", data=body, headers={"Content-Type": "application/msgpack"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status < 500
    after = server.count_reports()
    if status >= 400:
        assert after == before
    # The running statistics always equal what is stored.
    assert server.counted() == after
