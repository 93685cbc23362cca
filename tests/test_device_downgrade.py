"""A device that pins a shuffler against an aggregator that would have its report unshuffled, all
real processes on loopback (the aggregator, the shuffler, a hostile proxy, the Python device, the
Node device and the survey page in Chromium):

- shown a shuffled collection without its ``shuffle`` block (another uid, the fingerprint
  recomputed), a device reports to it directly only when the app names it (``direct``) and its
  shuffler holds no shuffled view of that id: refused otherwise, nothing sent to the aggregator;
- a genuinely direct collection the app names is reported to as before, and refused unnamed;
- a view whose floor or dummies are below the app's limits is refused before anything is drawn.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import pytest_asyncio

from participant import AsyncClient, Limits, ParticipantError

from .hostile import Proxy
from .servers import Server, ShufflerProcess, token_file
from .test_browser_device import READ_LEDGER
from .test_participant_js import BROWSER_ARGS, CHROMIUM, js_device, reports_stored, serving_survey_site
from .test_participant_js import create as create_direct
from .test_shuffled_guarantee import FAST, waiting_at_shuffler
from .test_shuffler import RECORD, SPEC, create

NOT_NAMED = "SpecError: collection 'c' is not shuffled, and this app pins a shuffler"
PINNED = "SpecError: the shuffler this app pins holds a shuffled view of collection 'c'"


# One Chromium and survey site for the module's tests (each test's pages in fresh profiles, closed
# after it; its own aggregator and shuffler): the tests share the event loop the browser runs on.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium_and_site(built):
    """(Chromium, the survey site) for the module."""
    from playwright.async_api import async_playwright

    async with serving_survey_site(built) as site, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        yield browser, site
        await browser.close()


@pytest_asyncio.fixture(loop_scope="module")
async def served(chromium_and_site, tmp_path):
    """A real aggregator and shuffler that allow the survey page's origin, the shuffled collection
    ``c`` (floor 3) and the direct collection ``open``, and a hostile proxy in front of the
    aggregator; Chromium's ``page(query, **config)`` opens the survey page in a fresh profile at
    ``query``, the page's own configuration naming the shuffler and ``config``, and returns it;
    ``site``, the survey site."""
    browser, survey_site = chromium_and_site
    origin = f"http://127.0.0.1:{survey_site}"
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--allow-origin", origin).start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", *FAST, "--allow-origin", origin).start()
    try:
        create(server, "c", shuffler.url, token, min_batch=3)
        create_direct(server, SPEC, "open")
        async with Proxy(server.url) as liar:

            async def page(query: str, **config):
                survey_site.config = {"shuffler": shuffler.url, **config}
                opened = await (await browser.new_context()).new_page()
                await opened.goto(f"{origin}/examples/survey.html?{query}")
                return opened

            yield SimpleNamespace(server=server, shuffler=shuffler, liar=liar, page=page, site=survey_site)
    finally:
        for context in browser.contexts:
            await context.close()
        shuffler.stop()
        server.stop()


async def python_device(url: str, ledger, shuffler: str, cid: str, **options) -> str:
    """One Python device's submit: the service's status, or the ParticipantError's name and message."""
    async with AsyncClient(url, ledger=ledger, pace=0.001, backoff=0.01, retries=1, shuffler=shuffler, **options) as device:
        try:
            return await device.submit(cid, RECORD)
        except ParticipantError as exc:
            return f"{type(exc).__name__}: {exc}"


async def sent_by_page(page) -> tuple[str, str, int]:
    """Send the survey page's answers: ``(outcome, status text, entries its IndexedDB ledger holds)``."""
    from playwright.async_api import expect

    await page.click("#send")
    status = page.locator("#status")
    await expect(status).to_have_attribute("data-outcome", re.compile("."), timeout=20_000)
    outcome, text = await status.get_attribute("data-outcome"), await status.text_content()
    databases = await page.evaluate("async () => (await indexedDB.databases()).map((d) => d.name)")
    entries = (await page.evaluate(READ_LEDGER, True))["entries"] if "ldpnb" in databases else 0
    return outcome, text, entries


async def test_a_device_pinning_a_shuffler_reports_unshuffled_only_to_the_collections_it_names(served, built, tmp_path):
    """The downgrade: the aggregator shows collection ``c`` without its ``shuffle`` block. A device
    that does not name ``c`` in ``direct`` refuses it; one that names it asks its shuffler, which
    holds a shuffled view of ``c``, and refuses too. The genuinely direct ``open``, named, is
    reported to; unnamed, refused."""
    liar, shuffler = served.liar, served.shuffler.url
    liar.mode = "plain"
    py = [
        await python_device(liar.url, tmp_path / "py-c.json", shuffler, "c"),
        await python_device(liar.url, tmp_path / "py-c-named.json", shuffler, "c", direct=["c", "open"]),
        await python_device(liar.url, tmp_path / "py-open.json", shuffler, "open", direct=["c", "open"]),
        await python_device(liar.url, tmp_path / "py-open-unnamed.json", shuffler, "open"),
    ]
    steps = lambda name: [["c", RECORD, str(tmp_path / f"{name}-c.json")], ["open", RECORD, str(tmp_path / f"{name}-open.json")]]  # noqa: E731
    node = await js_device(built, liar.url, tmp_path / "unused.json", steps("named"), full=True, shuffler=shuffler, direct=["c", "open"])
    node += await js_device(built, liar.url, tmp_path / "unused.json", steps("unnamed"), full=True, shuffler=shuffler)
    for outcomes in (py, [node[2], node[0], node[1], node[3]]):
        assert outcomes[0].startswith(NOT_NAMED), outcomes
        assert outcomes[1].startswith(PINNED), outcomes
        assert outcomes[2] == "accepted", outcomes
        assert outcomes[3].startswith("SpecError: collection 'open' is not shuffled, and this app pins a shuffler"), outcomes
    refused = ("py-c", "py-c-named", "py-open-unnamed", "named-c", "unnamed-c", "unnamed-open")
    assert not any((tmp_path / f"{name}.json").exists() for name in refused)  # nothing drawn or recorded
    # The survey page, through the liar: refused, named or not, and the direct collection unnamed.
    said = [
        await sent_by_page(await served.page(f"service={liar.url}&collection={cid}", direct=direct))
        for cid, direct in (("c", []), ("c", ["open", "c"]), ("open", []))
    ]
    assert [(outcome, entries) for outcome, _, entries in said] == [("SpecError", 0)] * 3
    assert NOT_NAMED.removeprefix("SpecError: ") in said[0][1] and PINNED.removeprefix("SpecError: ") in said[1][1]
    assert "collection 'open' is not shuffled" in said[2][1]
    # Nothing reached the aggregator for c, nor the shuffler; open has the two devices' reports.
    assert liar.seen[("POST", "/collections/c/reports")] == 0 and waiting_at_shuffler(served.shuffler.db) == 0
    assert liar.seen[("POST", "/collections/open/reports")] == 2 and reports_stored(served.server, "open") == 2


async def test_the_survey_page_reports_to_a_direct_collection_it_names(served):
    """The page names ``open`` (its configuration's ``direct``): its shuffler answers that it holds
    no shuffled view of it, readable by the page, and the page reports directly."""
    outcome, text, entries = await sent_by_page(await served.page(f"service={served.server.url}&collection=open&retries=1", direct=["open"]))
    assert (outcome, entries) == ("accepted", 1), text
    assert reports_stored(served.server, "open") == 1


async def test_a_view_below_the_apps_floor_or_dummies_is_refused_before_anything_is_drawn(served, built, tmp_path):
    """The shuffler's view of ``c`` holds batches to 3 people and a few dummies at most: a device
    whose app keeps the default limits (a floor of 100) refuses it, and so does one asking 10
    dummies per person of the floor (30), each before its ledger gains an entry."""
    url, shuffler = served.server.url, served.shuffler.url
    floor, share = "at least 100 people", "30 dummies, 10 times the floor"
    said = await python_device(url, tmp_path / "py-default.json", shuffler, "c")
    assert said.startswith("LimitExceeded") and f"{floor} (Limits.min_batch)" in said and said.endswith("nothing was drawn or sent")
    said = await python_device(url, tmp_path / "py-share.json", shuffler, "c", limits=Limits(min_batch=2, min_dummy_share=10))
    assert said.startswith("LimitExceeded") and f"{share} (Limits.min_dummy_share)" in said
    assert not (tmp_path / "py-default.json").exists() and not (tmp_path / "py-share.json").exists()
    for limits, why in (({"minBatch": 100, "minDummyShare": 1}, f"{floor} (minBatch)"), ({"minBatch": 2, "minDummyShare": 10}, f"{share} (minDummyShare)")):
        ledger = tmp_path / f"node-{limits['minDummyShare']}.json"
        [said] = await js_device(built, url, tmp_path / "unused.json", [["c", RECORD, str(ledger)]], full=True, shuffler=shuffler, **limits)
        assert said.startswith("LimitExceeded") and why in said, said
        assert not ledger.exists()
    for config, why in (({}, f"{floor} (minBatch)"), ({"minBatch": 2, "minDummyShare": 10}, f"{share} (minDummyShare)")):
        outcome, text, entries = await sent_by_page(await served.page(f"service={url}&collection=c", **config))
        assert (outcome, entries) == ("LimitExceeded", 0) and why in text, text
    assert waiting_at_shuffler(served.shuffler.db) == 0
    # Within the app's limits, the same devices report.
    permissive = Limits(min_batch=3, min_dummy_share=0)
    assert await python_device(url, tmp_path / "py-within.json", shuffler, "c", limits=permissive) == "accepted"


async def test_the_survey_pages_trust_comes_from_its_own_origin_never_from_the_link(served):
    """Whoever writes the link (the survey's operator) names only the service and the collection:
    a link that leaves the shuffler out, or sets its own floor, changes nothing (the page, pinning
    its configured shuffler, refuses the collection shown unshuffled, and keeps the app's floor);
    a page whose configuration cannot be read reports nothing."""
    liar, survey_site = served.liar, served.site
    liar.mode = "plain"
    outcome, text, entries = await sent_by_page(await served.page(f"service={liar.url}&collection=c&shuffler="))
    assert (outcome, entries) == ("SpecError", 0) and NOT_NAMED.removeprefix("SpecError: ") in text, text
    liar.mode = None
    query = f"service={served.server.url}&collection=c&minBatch=2&minDummyShare=0"
    outcome, text, entries = await sent_by_page(await served.page(query))
    assert (outcome, entries) == ("LimitExceeded", 0), text
    opened = await served.page(f"service={served.server.url}&collection=open", direct=["open"])
    survey_site.config = None  # the page's configuration gone: it loads no questions
    opened = await (await opened.context.browser.new_context()).new_page()
    await opened.goto(f"http://127.0.0.1:{survey_site}/examples/survey.html?service={served.server.url}&collection=open")
    from playwright.async_api import expect

    await expect(opened.locator("#status")).to_have_attribute("data-outcome", "unconfigured", timeout=20_000)
    assert await opened.locator("#send").is_disabled()
    # Opened without its link's service and collection, it says so (it sat on "Loading the questions…").
    await opened.goto(f"http://127.0.0.1:{survey_site}/examples/survey.html")
    await expect(opened.locator("#status")).to_have_attribute("data-outcome", "unlinked", timeout=20_000)
    assert "Loading" not in await opened.locator("#questions").text_content()
    assert liar.seen[("POST", "/collections/c/reports")] == 0 and waiting_at_shuffler(served.shuffler.db) == 0
