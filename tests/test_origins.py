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


@pytest.mark.parametrize("origin", ["https://elsewhere.example", "http://survey.example.org", "null", SURVEY + ":8443"])
async def test_every_other_page_is_refused_before_a_handler(url, origin):
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/collections/x/reports", data=b"\x80", headers={"Origin": origin}) as r:
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
            assert "not allowed" in (await r.json())["error"]
        async with session.options(f"{url}/collections/x/reports", headers={"Origin": origin}) as r:
            assert r.status == 403


async def test_devices_tools_and_the_services_own_page_are_not_touched(url):
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/healthz") as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
        async with session.get(f"{url}/healthz", headers={"Origin": url}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


def test_an_origin_is_scheme_host_and_port_only():
    from aggregator.service.origins import check_origin

    assert check_origin("HTTPS://Survey.Example.org/") == SURVEY
    for bad in ("survey.example.org", "ftp://x", "https://x/path", "https://x?q"):
        with pytest.raises(ValueError):
            check_origin(bad)
