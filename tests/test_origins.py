"""Which web pages may call the service from a browser (serve --allow-origin): preflights and
requests from a named origin carry its CORS headers, every other page's are refused 403, and
requests without an Origin (devices, tools) or from the service's own page are not touched."""

from __future__ import annotations

import aiohttp
import pytest

from aggregator.service.app import create_app, open_store, start_site
from aggregator.service.keys import Config

from .test_service import ADMIN

SURVEY = "https://survey.example.org"


@pytest.fixture
async def url(tmp_path):
    store, _ = await open_store(tmp_path / "origins.sqlite3", ADMIN)
    runner, base = await start_site(await create_app(store, Config(allowed_origins=(SURVEY,))))
    yield base
    await runner.cleanup()
    await store.close()


async def test_a_named_page_gets_its_preflight_and_its_answers(url):
    async with aiohttp.ClientSession() as session:
        preflight = {"Origin": SURVEY, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
        async with session.options(f"{url}/collections/x/reports", headers=preflight) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == SURVEY and r.headers["Vary"] == "Origin"
            assert "POST" in r.headers["Access-Control-Allow-Methods"]
            assert "Content-Type" in r.headers["Access-Control-Allow-Headers"]
        async with session.get(f"{url}/collections/nothing", headers={"Origin": SURVEY}) as r:
            assert r.status == 404 and r.headers["Access-Control-Allow-Origin"] == SURVEY
            # The page's participant reads a 429's or 503's Retry-After (not a safelisted header).
            assert r.headers["Access-Control-Expose-Headers"] == "Retry-After"
        # A spec is streamed by its handler (encoded once, sent in slices): its headers too.
        from .conftest import table_1_spec

        body = {"spec": table_1_spec().to_dict(), "id": "c1"}
        async with session.post(f"{url}/collections", json=body, headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 201
        async with session.get(f"{url}/collections/c1", headers={"Origin": SURVEY}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == SURVEY and "ETag" in r.headers


@pytest.mark.parametrize("origin", ["https://elsewhere.example", "http://survey.example.org", "null", SURVEY + ":8443"])
async def test_every_other_page_is_refused_before_a_handler(url, origin):
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections/x/reports", data=b"\x80", headers={"Origin": origin}) as r:
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
            assert "not allowed" in (await r.json())["error"]
        async with session.options(f"{url}/collections/x/reports", headers={"Origin": origin}) as r:
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
        # The spec's refusal is readable by the page, which can then say it is not allowed at once.
        async with session.get(f"{url}/collections/x", headers={"Origin": origin}) as r:
            assert r.status == 403 and r.headers["Access-Control-Allow-Origin"] == origin
            assert "not allowed" in (await r.json())["error"]


ADMIN_ROUTES = [
    ("GET", "/collections"), ("POST", "/collections"), ("GET", "/collections/x/status"), ("GET", "/metrics"),
    ("GET", "/collections/x/plausibility"), ("POST", "/collections/x/enrollments"), ("GET", "/collections/x/model"),
    ("GET", "/collections/x/estimates"), ("GET", "/healthz"), ("GET", "/openapi.json"),
]  # fmt: skip


@pytest.mark.parametrize("method, path", ADMIN_ROUTES)
async def test_a_named_page_may_call_only_what_a_participant_calls(url, method, path):
    """An allowed survey page reads specs and posts reports; it never reaches the admin routes,
    the metrics or a model, and they never answer it with CORS headers or a preflight."""
    async with aiohttp.ClientSession() as session:
        preflight = {"Origin": SURVEY, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": "authorization"}
        async with session.options(f"{url}{path}", headers=preflight) as r:
            assert r.status == 403 and not [h for h in r.headers if h.lower().startswith("access-control")]
        headers = {"Origin": SURVEY, "Authorization": f"Bearer {ADMIN}"}
        async with session.request(method, f"{url}{path}", headers=headers) as r:
            assert r.status == 403 and not [h for h in r.headers if h.lower().startswith("access-control")]


async def test_no_answer_lets_a_browser_send_credentials(url):
    async with aiohttp.ClientSession() as session:
        for method, path in [("GET", "/collections/x"), ("POST", "/collections/x/reports"), ("OPTIONS", "/collections/x/reports"),
                             *ADMIN_ROUTES]:  # fmt: skip
            for origin in (SURVEY, "https://elsewhere.example", None):
                headers = {"Access-Control-Request-Method": "POST"} | ({"Origin": origin} if origin else {})
                async with session.request(method, f"{url}{path}", headers=headers) as r:
                    assert "Access-Control-Allow-Credentials" not in r.headers, (method, path, origin)


async def test_devices_tools_and_the_services_own_page_are_not_touched(tmp_path):
    """Requests without an Origin, and from the configured public address, pass untouched; a page
    whose Origin and Host name the same other site (a name rebound to the service's address) is
    refused: the service's own origin is configured, never read off the request."""
    store, _ = await open_store(tmp_path / "own.sqlite3", ADMIN)
    config = Config(allowed_origins=(SURVEY,), public_origin="https://ldpnb.example.org")
    runner, url = await start_site(await create_app(store, config))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/healthz") as r:
                assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
            async with session.get(f"{url}/healthz", headers={"Origin": "https://ldpnb.example.org"}) as r:
                assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
            for own in (url, "http://evil.example"):
                host = own.split("//", 1)[1]
                async with session.get(f"{url}/collections", headers={"Origin": own, "Host": host, "Authorization": f"Bearer {ADMIN}"}) as r:
                    assert r.status == 403, own
    finally:
        await runner.cleanup()
        await store.close()


def test_an_origin_is_scheme_host_and_port_only():
    from aggregator.service.origins import check_origin

    assert check_origin("HTTPS://Survey.Example.org/") == SURVEY
    for bad in ("survey.example.org", "ftp://x", "https://x/path", "https://x?q"):
        with pytest.raises(ValueError):
            check_origin(bad)
