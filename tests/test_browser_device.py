"""The JavaScript device in Chromium, where a page runs it: a page without Web Crypto (plain http
at a name that is not localhost) says what it needs; a ledger in IndexedDB that the device did not
write fails closed; a draw never holds the page's main thread more than a tenth of a second."""

from __future__ import annotations

import pytest

from participant import CollectionSpec, Feature

from .servers import Server
from .test_participant_js import BROWSER_ARGS, CHROMIUM, create, reports_stored, survey_site  # noqa: F401 (the fixture)


@pytest.fixture
async def browser_and_service(built, survey_site, tmp_path):  # noqa: F811
    from playwright.async_api import async_playwright

    origins = [f"http://127.0.0.1:{survey_site}", f"http://survey.test:{survey_site}"]
    server = Server(tmp_path / "browser.sqlite3", None, 1, *(a for o in origins for a in ("--allow-origin", o))).start()
    try:
        async with async_playwright() as p:
            # survey.test resolves to this machine: a plain-http page that is not localhost (no secure context).
            args = [*BROWSER_ARGS, "--host-resolver-rules=MAP survey.test 127.0.0.1"]
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
            yield browser, server, survey_site
            await browser.close()
    finally:
        server.stop()


def survey(port: int, server, cid: str, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/examples/survey.html?service={server.url}&collection={cid}"


async def test_a_page_without_web_crypto_says_what_it_needs(browser_and_service):
    from playwright.async_api import expect

    browser, server, port = browser_and_service
    create(server, CollectionSpec([Feature("f", ["a", "b"])], ["y", "n"], "OUE", 1.0), "c")
    page = await (await browser.new_context()).new_page()
    await page.goto(survey(port, server, "c", host="survey.test"))
    assert await page.evaluate("window.isSecureContext") is False
    await expect(page.locator("#status")).to_have_attribute("data-outcome", "InsecureContext", timeout=20_000)
    assert "https or from localhost" in await page.locator("#status").text_content()


async def test_a_ledger_in_indexeddb_the_device_did_not_write_fails_closed(browser_and_service):
    from playwright.async_api import expect

    browser, server, port = browser_and_service
    create(server, CollectionSpec([Feature("f", ["a", "b"])], ["y", "n"], "OUE", 1.0), "c")
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(survey(port, server, "c"))
    await expect(page.locator("#send")).to_be_enabled(timeout=20_000)
    for n, text in enumerate(['{"version": 2, "entries": []}', '{"version": 2, "entries": {"k": {"sent": true}}}']):
        await page.evaluate(
            """text => new Promise((done, fail) => {
                const open = indexedDB.open("ldpnb", 1);
                open.onupgradeneeded = () => open.result.createObjectStore("ledger");
                open.onsuccess = () => {
                    const put = open.result.transaction("ledger", "readwrite").objectStore("ledger").put(text, "ledger");
                    put.onsuccess = () => done(); put.onerror = () => fail(put.error);
                };
            })""",
            text,
        )
        await page.click("#send")
        await expect(page.locator("#status")).to_have_attribute("data-outcome", "LedgerError", timeout=20_000)
        await page.evaluate("document.getElementById('status').dataset.outcome = ''")
    assert reports_stored(server, "c") == 0


def she(categories: int) -> CollectionSpec:
    return CollectionSpec([Feature("f", [f"v{i}" for i in range(categories)])], ["y", "n"], "SHE", 1.0)


async def test_a_draw_never_holds_the_pages_main_thread_more_than_a_tenth_of_a_second(browser_and_service):
    """A SHE spec the page admits draws without a long task over 100 ms; one past the slow-device
    figure is refused as the page loads it, nothing drawn. The page estimates with the larger of
    that figure and twice its own measured speed, so what it admits depends on how loaded the
    machine is when it measures: the spec that fits is well inside (240 noise draws, 0.048 s on a
    slow device; a loaded test machine measured itself at 1.6 times slower than that figure and
    refused 400), the one that does not is past the figure whatever the machine measures."""
    from playwright.async_api import expect

    browser, server, port = browser_and_service
    create(server, she(120), "fits")  # 240 noise draws
    create(server, she(300), "over")  # 600: 0.12 s at the slow-device figure alone
    page = await (await browser.new_context()).new_page()
    said = []  # what the page says, to tell why it did not load
    page.on("console", lambda message: said.append(f"console: {message.text}"))
    page.on("pageerror", lambda error: said.append(f"error: {error}"))
    page.on("requestfailed", lambda request: said.append(f"failed: {request.url} {request.failure}"))
    await page.goto(survey(port, server, "fits"))
    try:
        await expect(page.locator("#send")).to_be_enabled(timeout=20_000)
    except AssertionError:
        raise AssertionError(f"the page did not load the spec: {said} {await page.locator('#status').text_content()!r}") from None
    await page.evaluate(
        """() => { window.longest = 0;
                   new PerformanceObserver(list => list.getEntries().forEach(e => { window.longest = Math.max(window.longest, e.duration); }))
                     .observe({ type: "longtask", buffered: true }); }"""
    )
    # The observer sees a task that holds the thread (a 150 ms loop), so that it would see a long draw.
    await page.evaluate("setTimeout(() => { const end = performance.now() + 150; while (performance.now() < end); }, 0)")
    await page.wait_for_function("window.longest > 100", timeout=10_000)
    await page.evaluate("window.longest = 0")
    await page.click("#send")
    await expect(page.locator("#status")).to_have_attribute("data-outcome", "accepted", timeout=20_000)
    assert await page.evaluate("window.longest") < 100
    assert reports_stored(server, "fits") == 1
    page = await (await browser.new_context()).new_page()
    await page.goto(survey(port, server, "over"))  # refused as the questions load: nothing to send
    await expect(page.locator("#status")).to_have_attribute("data-outcome", "LimitExceeded", timeout=20_000)
    assert await page.locator("#send").is_disabled()
    assert "main thread" in await page.locator("#status").text_content()
    assert reports_stored(server, "over") == 0
