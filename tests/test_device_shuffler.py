"""What a device that pins a shuffler decides on its own, without a real aggregator or shuffler: the
amplification a shuffled collection must give (``Limits.min_batch``, ``Limits.min_dummy_share``),
and the unshuffled collections it reports to directly (``direct``), asking its shuffler first.
tests/test_device_downgrade.py tries the same against real processes, in Python, Node and Chromium."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest
from aiohttp import web

from aggregator.service.app import start_site
from participant import AsyncClient, Client, CollectionSpec, Feature, LimitExceeded, Limits, SpecError, SubmissionFailed
from participant.ledger import Ledger
from protocols.shuffling import DUMMY_SHARE, flooded_epsilon, shuffled_epsilon


def test_the_amplification_limits_default_to_the_shufflers_floor_and_share_and_are_checked():
    assert (Limits().min_batch, Limits().min_dummy_share) == (100, DUMMY_SHARE) == (100, 1.0)
    assert Limits(min_batch=2, min_dummy_share=0).min_dummy_share == 0
    for bad in (0, -1, 2.5, True, "100", math.inf):
        with pytest.raises(ValueError, match="min_batch"):
            Limits(min_batch=bad)
    for bad in (-0.1, math.inf, math.nan, True, "1"):
        with pytest.raises(ValueError, match="min_dummy_share"):
            Limits(min_dummy_share=bad)


def test_the_defaults_amplify_as_the_limits_docstring_says():
    """(0.76, 1.27) at a floor of 100 with 100 dummies, (1.96, 1.98) at 10: what Limits states."""
    for people, stated in ((100, (0.76, 1.27)), (10, (1.96, 1.98))):
        delta = 1 / (10 * people)
        computed = (shuffled_epsilon(2.0, 2 * people, delta), flooded_epsilon(2.0, people, delta))
        assert tuple(round(e, 2) for e in computed) == stated
        assert f"{stated[0]}" in Limits.__doc__ and f"{stated[1]}" in Limits.__doc__


def test_a_view_is_refused_below_the_apps_floor_or_share_of_dummies_and_taken_exactly_at_them():
    limits = Limits(min_batch=50, min_dummy_share=0.5)
    view = lambda min_batch, dummies: SimpleNamespace(min_batch=min_batch, dummies=dummies)  # noqa: E731
    limits.check_view(view(50, 25), "c")
    limits.check_view(view(51, 26), "c")  # ceil(0.5 * 51)
    for refused, why in [
        (view(49, 1000), "batches of 49 people and 1000 dummies; this app needs at least 50 people (Limits.min_batch)"),
        (view(50, 24), "25 dummies, 0.5 times the floor (Limits.min_dummy_share)"),
        (view(51, 25), "26 dummies"),
    ]:
        with pytest.raises(LimitExceeded, match=r"nothing was drawn or sent$") as raised:
            limits.check_view(refused, "c")
        assert why in str(raised.value)
    Limits().check_view(view(100, 100), "c")
    for refused in (view(100, 99), view(99, 1000), view(10, 10)):
        with pytest.raises(LimitExceeded):
            Limits().check_view(refused, "c")
    Limits(min_batch=2, min_dummy_share=0).check_view(view(2, 0), "c")


def test_direct_is_a_list_of_collection_ids_and_one_string_is_refused_at_construction():
    assert AsyncClient("http://127.0.0.1:9", ledger=None, direct=["a", "b"]).direct == {"a", "b"}
    assert AsyncClient("http://127.0.0.1:9", ledger=None, direct=(i for i in ["a"])).direct == {"a"}
    assert AsyncClient("http://127.0.0.1:9", ledger=None).direct == frozenset()
    for bad, why in [("ab", "not one string"), (b"ab", "not one string"), (3, "a list of"), (None, "a list of"), (["a", 3], "strings")]:
        with pytest.raises(TypeError, match=why):
            AsyncClient("http://127.0.0.1:9", ledger=None, direct=bad)
        with pytest.raises(TypeError, match=why):
            Client("http://127.0.0.1:9", ledger=None, direct=bad)


SPEC = CollectionSpec([Feature("f", ["a", "b"])], ["x", "y"], "DE", 1.0)


@pytest.fixture
async def plain():
    """One loopback server as both an aggregator publishing the unshuffled collection ``plain`` and
    a shuffler answering its view with ``site.view_status`` and ``site.view_reason``; ``site.seen``
    counts requests."""
    site = SimpleNamespace(view_status=404, view_reason="unknown", seen=Counter())
    answer = {"id": "plain", "uid": "u" * 32, "fingerprint": SPEC.fingerprint, "spec": SPEC.to_dict()}

    async def handle(request: web.Request) -> web.Response:
        key = (request.method, request.path)
        site.seen[key] += 1
        await request.read()
        if key == ("GET", "/collections/plain"):
            return web.json_response(answer)
        if key == ("GET", "/collections/plain/view"):
            return web.json_response({"error": "said by the test", "reason": site.view_reason}, status=site.view_status)
        if key == ("POST", "/collections/plain/reports"):
            return web.json_response({"status": "accepted"}, status=201)
        return web.json_response({}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner, site.url = await start_site(app)
    yield site
    await runner.cleanup()


async def test_an_app_pinning_a_shuffler_reports_unshuffled_only_where_it_names_and_its_shuffler_knows_no_shuffled_view(
    plain, tmp_path
):
    async def outcome(view_status: int, ledger, reason: str | None = None, **options) -> str:
        plain.view_status, plain.view_reason = view_status, reason
        plain.seen.clear()
        options.setdefault("shuffler", plain.url)
        async with AsyncClient(plain.url, ledger=ledger, pace=0.001, retries=0, **options) as device:
            return await device.submit("plain", {"f": "a", "class": "x"})

    for status, reason, direct, error, why in [
        (404, "unknown", (), SpecError, r"'plain' is not shuffled, and this app pins a shuffler: .* \(direct=\[\]\); nothing was sent$"),
        (200, None, ("plain",), SpecError, "holds a shuffled view of collection 'plain', which the aggregator shows unshuffled"),
        (400, None, ("plain",), SpecError, "answered 400 .* refusing to report directly"),
        (503, None, ("plain",), SubmissionFailed, "view failed after 1 attempts"),
        # Shuffled at the aggregator, its batches too large for one request: not a direct collection.
        (409, "too_large", ("plain",), SpecError, r"answered 409 \(too_large\) .* refusing to report directly"),
        (404, None, ("plain",), SpecError, r"answered 404 \(no reason\) .* refusing to report directly"),
    ]:
        with pytest.raises(error, match=why):
            await outcome(status, tmp_path / "refused.json", reason, direct=direct)
        assert plain.seen[("POST", "/collections/plain/reports")] == 0
        assert plain.seen[("GET", "/collections/plain/view")] == (0 if not direct else 1)
        assert not Ledger(tmp_path / "refused.json").entries()  # nothing drawn or recorded
    for status, reason in ((404, "unknown"), (409, "not_shuffled")):
        assert await outcome(status, tmp_path / f"named{status}.json", reason, direct=["other", "plain"]) == "accepted"
        assert plain.seen[("GET", "/collections/plain/view")] == plain.seen[("POST", "/collections/plain/reports")] == 1
    assert await outcome(200, tmp_path / "unpinned.json", shuffler=None) == "accepted"
    assert plain.seen[("GET", "/collections/plain/view")] == 0
