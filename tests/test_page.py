"""The status page in a real browser (Debian's Chromium driven by Playwright): progress moving,
the release, the plotted conditionals equal to /model, and no admin data without the token."""

import os
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import pytest_asyncio
from playwright.async_api import async_playwright, expect

from aggregator.service.app import create_app, open_store, start_site
from participant import Participant
from participant.wire import pack_batch

from .conftest import TABLE_1, table_1_spec
from .test_service import ADMIN, AUTH, MSGPACK

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
DOCS = Path(__file__).resolve().parents[1] / "docs"
# The README's picture of the page is this test's screenshot; a run writes it there only when asked
# (LDPNB_UPDATE_DOCS=1), so that the suite leaves the checkout as it found it.
UPDATE_DOCS = os.environ.get("LDPNB_UPDATE_DOCS") == "1"
FIELDS = ["age", "income", "gender", "missed_payment"]


# One Chromium for the module's tests, each in a context of its own (its own cookies and storage):
# the tests share its event loop, as the browser is bound to the loop that launched it.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module")
async def site(tmp_path):
    store, _ = await open_store(tmp_path / "page.sqlite3", ADMIN)
    runner, url = await start_site(await create_app(store))
    yield url
    await runner.cleanup()
    await store.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium():
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        await browser.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium):
    """The module's Chromium: each ``new_page`` in a context of its own, every one closed after the test."""
    yield chromium
    for context in chromium.contexts:
        await context.close()


async def send(session, url, spec, n, seed):
    participant = Participant(spec, rng=np.random.default_rng(seed))
    reports = [participant.report(dict(zip(FIELDS, TABLE_1[i % 10]))) for i in range(n)]
    async with session.post(f"{url}/collections/survey/reports", data=pack_batch(reports, spec), headers=MSGPACK) as r:
        assert r.status == 200


async def test_the_page_shows_progress_release_and_the_model(site, browser, tmp_path):
    spec = table_1_spec(protocol="OUE", epsilon=4.0)
    requests = []
    async with aiohttp.ClientSession() as session:
        body = {"spec": spec.to_dict(), "id": "survey", "min_reports": 400}
        async with session.post(f"{site}/collections", json=body, headers=AUTH) as r:
            assert r.status == 201
        page = await browser.new_page(viewport={"width": 1100, "height": 900})
        page.on("request", lambda request: requests.append(request))
        await page.goto(f"{site}/collections/survey/view?interval=0.5")
        bar = page.locator("#progress [role=progressbar]")
        await bar.wait_for()
        assert await bar.get_attribute("aria-valuenow") == "0"
        await send(session, site, spec, 150, seed=1)
        await expect(bar).to_have_attribute("aria-valuenow", "150")
        assert "150 of 400 reports (37 %)" in await bar.inner_text()
        # Without the token: nothing an admin route holds, and no token anywhere in a request.
        assert await page.locator("#admin").count() == 0 and await page.locator("#plausibility").count() == 0
        await send(session, site, spec, 1850, seed=2)
        await page.locator("#model svg[data-chart=prior]").wait_for(timeout=10_000)
        async with session.get(f"{site}/collections/survey/model") as r:
            model = await r.json()
        # Every plotted conditional equals the model's probability.
        k = len(spec.classes)
        for i, feature in enumerate(spec.features):
            counts = np.array(model["category_count"][i])
            expected = counts / counts.sum(axis=1, keepdims=True)
            for a, category in enumerate(feature.categories):
                for c, label in enumerate(spec.classes):
                    rect = page.locator(
                        f'svg[data-chart="feature-{i}"] rect[data-group="{category}"][data-series="{label}"]'
                    )
                    assert float(await rect.get_attribute("data-value")) == pytest.approx(expected[c, a], abs=1e-12)
                    assert float(await rect.get_attribute("data-error")) > 0
        assert k == 2 and await page.locator("#download").get_attribute("href") == "/collections/survey/model"
        # The prior's whiskers are its pooled standard errors, as the evidence gives them.
        for label in spec.classes:
            rect = page.locator(f'svg[data-chart="prior"] rect[data-group="prior"][data-series="{label}"]')
            error = float(await rect.get_attribute("data-error"))
            assert error == pytest.approx(model["evidence"]["class_prior_standard_error"][label], rel=1e-9)
        # What the reports can tell the model, in its words.
        assert await page.locator("#evidence").inner_text() == model["evidence"]["summary"]
        assert "most common class" in model["evidence"]["summary"]
        assert await page.locator("#admin").count() == 0
        assert not any("authorization" in {h.lower() for h in r.headers} for r in requests)
        # With the token, entered once: the admin parts appear; it never shows in a URL or a cookie.
        await page.fill("#token", ADMIN)
        await page.click("#token-form button[type=submit]")
        await page.locator("#plausibility").wait_for()
        assert "nothing flagged" in await page.locator("#plausibility").inner_text()
        await page.wait_for_timeout(1200)  # a few refreshes draw the reports-over-time chart
        assert await page.locator("svg[data-chart=reports-over-time]").count() == 1
        assert all(ADMIN not in r.url for r in requests) and await page.context.cookies() == []
        screenshot = (DOCS if UPDATE_DOCS else tmp_path) / "status-page.png"
        screenshot.parent.mkdir(exist_ok=True)
        await page.screenshot(path=str(screenshot), full_page=True)
        # The home page lists the collections for the admin.
        await page.goto(f"{site}/")
        await page.locator("a[href='/collections/survey/view']").wait_for()
        assert "released" in await page.locator("table").inner_text()
        assert os.path.getsize(screenshot) > 10_000


async def test_long_labels_show_whole_and_the_page_asks_for_nothing_missing(site, browser):
    """Category labels wrap under their bars and carry a tooltip: "pretentious" is not cut to
    "pretentiou"; the icon the page and the browser ask for is there (no 404 at all)."""
    from participant import CollectionSpec, Feature

    categories = ["pretentious", "a long label with several words", "x"]
    spec = CollectionSpec([Feature("style", categories)], ["yes", "no"], "OUE", 4.0)
    failed = []
    async with aiohttp.ClientSession() as session:
        body = {"spec": spec.to_dict(), "id": "labels", "min_reports": 10}
        async with session.post(f"{site}/collections", json=body, headers=AUTH) as r:
            assert r.status == 201
        participant = Participant(spec, rng=np.random.default_rng(0))
        reports = [participant.report({"style": categories[i % 3], spec.label: "yes"}) for i in range(50)]
        async with session.post(f"{site}/collections/labels/reports", data=pack_batch(reports, spec), headers=MSGPACK) as r:
            assert r.status == 200
        async with session.get(f"{site}/favicon.ico") as r:
            assert r.status == 200 and r.content_type == "image/svg+xml"
    page = await browser.new_page()
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    await page.goto(f"{site}/collections/labels/view")
    chart = page.locator('svg[data-chart="feature-0"]')
    await chart.wait_for(timeout=10_000)
    for category in categories:
        label = chart.locator(f'text[data-label="{category}"]')
        assert (await label.text_content()).count(category.split()[0]) >= 1
        assert await label.locator("title").text_content() == category
        assert "".join(await label.locator("tspan").all_text_contents()).replace(" ", "") == category.replace(" ", "")
    await page.wait_for_timeout(500)
    assert failed == []


async def test_the_home_page_lists_nothing_without_the_token(site, browser):
    page = await browser.new_page()
    await page.goto(f"{site}/")
    await page.get_by_text("Enter the admin token").wait_for()
    assert await page.locator("table").count() == 0


@pytest.mark.parametrize("interval", ["abc", "0", "-5"])
async def test_a_bad_refresh_interval_is_the_default_not_a_busy_loop(site, browser, interval):
    page = await browser.new_page()
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    await page.goto(f"{site}/?interval={interval}")
    await page.wait_for_timeout(3000)
    # The default refreshes every 2 s: the page itself, a few reads each refresh; a busy loop sends hundreds.
    assert len(requests) < 20, len(requests)


async def test_a_gaussian_models_prior_shows_the_class_inputs_standard_errors(site, browser):
    """A released Gaussian collection: the prior's whiskers are the evidence's standard errors
    (the class input's), each class mean's is its estimate's standard error, named for its
    coordinate, and the page says what the reports tell the model."""
    from participant import CollectionSpec
    from participant.continuous import ContinuousFeature, Preparation

    prep = Preparation([ContinuousFeature("h", 0.0, 2.0)])
    spec = CollectionSpec([], ["a", "b"], "DE", 2.0, continuous=prep, model="gaussian", approach=3)
    rng = np.random.default_rng(5)
    participant = Participant(spec, rng=rng)
    values, labels = rng.uniform(0, 2, 300), rng.choice(["a", "b"], 300)
    reports = [participant.report({"h": float(v), "class": str(c)}) for v, c in zip(values, labels)]
    async with aiohttp.ClientSession() as session:
        body = {"spec": spec.to_dict(), "id": "survey"}
        async with session.post(f"{site}/collections", json=body, headers=AUTH) as r:
            assert r.status == 201
        batch = pack_batch(reports, spec)
        async with session.post(f"{site}/collections/survey/reports", data=batch, headers=MSGPACK) as r:
            assert r.status == 200
        async with session.get(f"{site}/collections/survey/model") as r:
            model = await r.json()
    page = await browser.new_page()
    await page.goto(f"{site}/collections/survey/view")
    await page.locator("#model svg[data-chart=prior]").wait_for(timeout=10_000)
    for label in spec.classes:
        rect = page.locator(f'svg[data-chart="prior"] rect[data-group="prior"][data-series="{label}"]')
        error = float(await rect.get_attribute("data-error"))
        assert error == pytest.approx(model["evidence"]["class_prior_standard_error"][label], rel=1e-9) and error > 0
        # Each class mean's whisker is its standard error (the chart's unit is half the prepared range).
        rect = page.locator(f'svg[data-chart="means"] rect[data-group="h"][data-series="{label}"]')
        error = float(await rect.get_attribute("data-error"))
        assert error == pytest.approx(model["evidence"]["class_mean_standard_error"][label][0] / 2, rel=1e-9)
    assert await page.locator("#evidence").inner_text() == model["evidence"]["summary"]
