"""Anonymous tokens from the JavaScript device (participant-js: Node and the survey page in
Chromium) against real processes on loopback: the aggregator as issuer, the shuffler checking
tokens. Enrolled people report with their codes and are counted; a device without a code, with a
used one, or whose issuer signs under another key sends nothing; a device stopped before its
token came asks the very same request again and is answered the same; and the two devices agree:
a token Node makes verifies with the Python participant's check, a request Node blinds is signed
by the Python issuer and finishes, in Python, to a token that verifies."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import subprocess
import urllib.parse
from types import SimpleNamespace

import msgpack
import pytest
import pytest_asyncio
from aiohttp import ClientSession, web

from aggregator.service.app import start_site
from participant import CollectionSpec, blind_rsa, tokens
from participant.ledger import Ledger
from participant.sealing import new_key_pair, open_sealed, sealed_length
from participant.view import ShuffledView

from .hostile import Proxy
from .js_vectors import issuer_keys
from .postgres import die_with_parent
from .servers import AUTH, Server, ShufflerProcess, token_file
from .test_participant_js import BROWSER_ARGS, CHROMIUM, js_device, serving_survey_site
from .test_browser_device import report_bytes
from .test_shuffled_guarantee import sealed_under
from .test_shuffler import RECORD, SPEC, call, counted, wait_for


# One aggregator, shuffler and survey site for the module's tests, each enrolling people in
# collections of its own ids; the tests share the event loop the site runs on.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def enrolled(built, tmp_path_factory):
    """A real aggregator and shuffler, both allowing the survey page's origin."""
    tmp_path = tmp_path_factory.mktemp("enrolled")
    async with serving_survey_site(built) as survey_site:
        page = f"http://127.0.0.1:{survey_site}"
        token = token_file(tmp_path / "token.txt")
        server = Server(tmp_path / "aggregator.sqlite3", None, 1, "--allow-origin", page).start()
        try:
            shuffler = ShufflerProcess(tmp_path / "shuffler.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3",
                                       "--min-batch", "2", "--dummies", "0", "--per-address", "0", "--allow-origin", page).start()  # fmt: skip
            try:
                survey_site.config = {"shuffler": shuffler.url, "minBatch": 2, "minDummyShare": 0}  # the page's own configuration
                yield SimpleNamespace(server=server, shuffler=shuffler, token=token, page=page, db=tmp_path / "shuffler.sqlite3")
            finally:
                shuffler.stop()
        finally:
            server.stop()


def create_enrolled(site, cid: str, min_batch: int, codes: int) -> tuple[list[str], ShuffledView]:
    """A shuffled collection taking reports only from enrolled people: ``codes`` one-time codes and its view."""
    block = {"url": site.shuffler.url, "token": site.token, "min_batch": min_batch, "dummies": 0}
    body = {"spec": SPEC.to_dict(), "id": cid, "min_reports": 1, "enrollment": True, "shuffler": block}
    call(f"{site.server.url}/collections", "POST", body, AUTH)
    issued = call(f"{site.server.url}/collections/{cid}/enrollments", "POST", {"count": codes}, AUTH)["tokens"]
    return issued, ShuffledView.from_dict(call(f"{site.shuffler.url}/collections/{cid}/view"))


# What a page's IndexedDB ledger holds: every record of its two stores.
INDEXED_DB = """async () => {
  const db = await new Promise((ok, no) => { const r = indexedDB.open("ldpnb"); r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
  const t = db.transaction(["entries", "reports"]);
  const all = (name) => new Promise((ok) => { const r = t.objectStore(name).getAll(); r.onsuccess = () => ok(r.result); });
  // Deflated bytes (a Uint8Array) as {deflated: base64}, as the browser tests read them.
  const plain = (v) => v instanceof Uint8Array ? { deflated: btoa(Array.from(v, (b) => String.fromCharCode(b)).join("")) } : v;
  const reports = (await all("reports")).map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, plain(v)])));
  return { entries: await all("entries"), reports };
}"""


def node(site, **options) -> dict:
    return {"shuffler": site.shuffler.url, "pace": 0.001, "backoff": 0.01} | options


def step(cid: str, ledger, code: str | None = None) -> list:
    """One submit-step of participant-js/test-support/submit.ts: its own ledger, and its code."""
    return [cid, RECORD, str(ledger), None, None, code]


def kept(ledger) -> dict:
    """The Node device's one ledger entry, read by the Python participant."""
    (entry,) = Ledger(ledger).entries().values()
    return entry


def sealed_of(entry: dict) -> bytes:
    return base64.b64decode(entry["sealed"])


def waiting(site, cid: str) -> int:
    """Reports the shuffler stored for ``cid`` and has not released."""
    return site.shuffler.status().get(cid, {}).get("waiting", 0)


async def test_node_devices_and_the_survey_page_report_with_their_codes_and_nobody_else_does(enrolled, built, tmp_path):
    from playwright.async_api import async_playwright, expect

    site = enrolled
    cid = "page"  # the collection of this test alone: the module shares one service
    codes, view = create_enrolled(site, cid, min_batch=3, codes=4)
    steps = [step(cid, tmp_path / f"n{i}.json", codes[i]) for i in range(2)]
    assert await js_device(built, site.server.url, tmp_path / "unused.json", steps, **node(site)) == ["accepted"] * 2
    survey = f"{site.page}/examples/survey.html?service={site.server.url}&collection={cid}"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        code = lambda i: f"&code={urllib.parse.quote(codes[i], safe='')}"  # noqa: E731 (the invite link's)
        for query, outcome in (("", "SpecError"), (code(2), "accepted"), (code(0), "ReportRejected")):
            page = await (await browser.new_context()).new_page()
            await page.goto(survey + query)
            await page.select_option("#q-colour", "green")
            await page.click("#send")
            await expect(page.locator("#status")).to_have_attribute("data-outcome", outcome, timeout=20_000)
            if outcome == "SpecError":
                assert "only from enrolled people" in await page.locator("#status").text_content()
        # The page whose code was used: its IndexedDB ledger keeps the report and, in place of
        # the sealed copy, the sealed report with its request and blind, unsent.
        stores = await page.evaluate(INDEXED_DB)
        (entry,), (report,) = stores["entries"], stores["reports"]
        size = tokens.token_length(view) - tokens.INPUT_BYTES
        assert not entry["sent"] and (entry["report"], entry["sealed"]) == ("kept", "") and report_bytes(report["report"])
        assert len(report_bytes(report["sealed"])) == sealed_length(view.spec) + 3 + 2 * size
        await browser.close()
    await asyncio.to_thread(wait_for, lambda: counted(site.server, cid) == 3)
    # Without a code: refused before the record is read, the ledger untouched. With a used code:
    # the issuer refuses it, and the report drawn for it never leaves.
    outcomes = await js_device(built, site.server.url, tmp_path / "unused.json",
                               [step(cid, tmp_path / "none.json"), step(cid, tmp_path / "used.json", codes[0])], full=True, **node(site))  # fmt: skip
    assert outcomes[0].startswith("SpecError") and "only from enrolled people: pass the code" in outcomes[0], outcomes
    assert outcomes[1].startswith("ReportRejected: aggregator answered 409"), outcomes
    assert "one token per code" in outcomes[1], outcomes
    assert not (tmp_path / "none.json").exists()
    entry = kept(tmp_path / "used.json")
    size = tokens.token_length(view) - tokens.INPUT_BYTES
    assert not entry["sent"] and len(sealed_of(entry)) == sealed_length(view.spec) + 3 + 2 * size  # a request, no token
    await asyncio.sleep(0.9)  # three release rounds
    assert counted(site.server, cid) == 3 and waiting(site, cid) == 0


async def test_a_token_node_makes_verifies_in_python_and_its_request_spent_the_code_at_the_python_issuer(enrolled, built):
    site = enrolled
    cid = "verified"  # the collection of this test alone: the module shares one service
    codes, view = create_enrolled(site, cid, min_batch=3, codes=2)
    sealed = sealed_under(view)
    done = subprocess.run(
        ["node", "dist/test-support/token.js", site.server.url, site.shuffler.url, cid, codes[0], sealed.hex()],
        cwd=built, capture_output=True, text=True, timeout=60, preexec_fn=die_with_parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    made = json.loads(done.stdout)
    token, request = bytes.fromhex(made["token"]), bytes.fromhex(made["request"])
    tokens.check(view, sealed, token)  # Node's token, checked as the shuffler checks it
    with pytest.raises(tokens.TokenError, match="another report"):
        tokens.check(view, sealed_under(view), token)
    # The Python issuer signed Node's request: the code is spent on it, the same request again
    # gets the same answer (200), any other 409.
    assert tokens.read_request(view.spec.shuffle.issuer_key, request)
    assert issue(site.server.url, cid, codes[0], request)[0] == 200
    other, _ = tokens.token_request(view, sealed)
    assert issue(site.server.url, cid, codes[0], other)[0] == 409


def issue(url: str, cid: str, code: str, request: bytes) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    body = msgpack.packb({"code": code, "request": request})
    asked = urllib.request.Request(f"{url}/collections/{cid}/tokens", data=body, method="POST",
                                   headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})  # fmt: skip
    try:
        with urllib.request.urlopen(asked, timeout=10) as answer:
            return answer.status, msgpack.unpackb(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


@contextlib.asynccontextmanager
async def relay(target: str):
    """A proxy in front of the aggregator at ``target`` that records each token request it passes
    (``requests``) and cuts the connection of the next ones as ``cut`` says: ``"before"`` (the
    issuer never sees the request) or ``"after"`` (the issuer answered; the answer is lost)."""
    state = SimpleNamespace(requests=[], cut=[], url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.path.endswith("/tokens"):
            state.requests.append(msgpack.unpackb(body)["request"])
            if state.cut and state.cut[0] == "before":
                state.cut.pop(0)
                request.transport.abort()
                return web.Response(status=500)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        forwarded = session.request(request.method, target + request.path_qs, data=body, headers=headers, allow_redirects=False)
        async with forwarded as answer:
            data, status, ctype = await answer.read(), answer.status, answer.headers.get("Content-Type")
        if request.path.endswith("/tokens") and state.cut:
            state.cut.pop(0)
            request.transport.abort()  # the issuer signed and remembered; the device never hears it
            return web.Response(status=500)
        return web.Response(body=data, status=status, headers={"Content-Type": ctype} if ctype else {})

    async with ClientSession() as session:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner, state.url = await start_site(app)
        try:
            yield state
        finally:
            await runner.cleanup()


async def test_a_node_device_stopped_before_its_token_came_asks_the_same_request_and_is_answered_the_same(
    enrolled, built, tmp_path
):
    site = enrolled
    cid = "stopped"  # the collection of this test alone: the module shares one service
    codes, view = create_enrolled(site, cid, min_batch=2, codes=2)
    length, size = sealed_length(view.spec), tokens.token_length(view) - tokens.INPUT_BYTES
    async with relay(site.server.url) as proxy:
        # The first device's request is signed and the answer lost; the second's never reaches the
        # issuer. Each device stops there (no retries): its ledger holds sealed ‖ request ‖ inverse.
        proxy.cut = ["after", "before"]
        steps = [step(cid, tmp_path / "a.json", codes[0]), step(cid, tmp_path / "b.json", codes[1])]
        stopped = await js_device(built, proxy.url, tmp_path / "unused.json", steps, **node(site, retries=0))
        assert stopped == ["SubmissionFailed"] * 2
        pending = []
        for name in ("a.json", "b.json"):
            entry = kept(tmp_path / name)
            stored = sealed_of(entry)
            assert not entry["sent"] and len(stored) == length + 3 + 2 * size
            pending.append((stored[:length], stored[length : length + 3 + size], stored[length + 3 + size :]))
        assert proxy.requests == [pending[0][1], pending[1][1]]  # written to the ledger before it was sent
        # Node blinded, the Python issuer signs (the same answer again) and Python finishes with Node's blind.
        sealed, request, inverse = pending[0]
        status, answer = issue(site.server.url, cid, codes[0], request)
        assert status == 200
        tokens.check(view, sealed, tokens.finish(view, sealed, answer["response"], int.from_bytes(inverse, "big")))
        # Started again, each device asks the very same request: the first is answered the same
        # (a new request with its code would be refused, 409), the second signed now.
        assert await js_device(built, proxy.url, tmp_path / "unused.json", steps, **node(site)) == ["accepted"] * 2
        assert proxy.requests[2:] == [pending[0][1], pending[1][1]]
    assert kept(tmp_path / "a.json")["sent"] and kept(tmp_path / "b.json")["sent"]
    await asyncio.to_thread(wait_for, lambda: counted(site.server, cid) == 2)


async def test_a_node_device_whose_issuer_signs_under_another_key_sends_nothing(enrolled, built, tmp_path):
    from cryptography.hazmat.primitives.asymmetric import rsa

    site = enrolled
    cid = "other-key"  # the collection of this test alone: the module shares one service
    codes, view = create_enrolled(site, cid, min_batch=2, codes=1)
    async with Proxy(site.server.url) as liar:
        # Another key of the same size, whose modulus is the larger: it signs whatever blinded
        # message the device sends (a smaller one would refuse half of them), under the wrong key.
        collection_n = tokens.issuing_key(view.spec.shuffle.issuer_key).public_numbers().n
        liar.issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        while liar.issuer_key.public_key().public_numbers().n <= collection_n:
            liar.issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        steps = [step(cid, tmp_path / "d.json", codes[0])]
        outcomes = await js_device(built, liar.url, tmp_path / "unused.json", steps, full=True, **node(site))
        assert liar.seen[("POST", f"/collections/{cid}/tokens")] == 1
    assert outcomes[0].startswith("BlindSignatureError"), outcomes
    assert "not a signature under the collection's issuing key" in outcomes[0], outcomes
    entry = kept(tmp_path / "d.json")
    size = tokens.token_length(view) - tokens.INPUT_BYTES
    assert not entry["sent"] and len(sealed_of(entry)) == sealed_length(view.spec) + 3 + 2 * size  # no token kept
    await asyncio.sleep(0.6)
    assert waiting(site, cid) == 0 and counted(site.server, cid) == 0


async def test_a_node_device_refuses_a_key_it_cannot_check_or_a_missing_code_before_the_record_is_read(built, tmp_path):
    """One loopback site as aggregator and shuffler publishing collections whose issuing key is RSA
    of 1024 bits, elliptic-curve, not a key, or RSA of 2048 bits: each step passes a group the spec
    does not take, so a device that read the record would say RecordError; it says SpecError for
    each key it cannot check tokens under, and for the good key without a code, and posts nothing."""
    _, rsa_2048, rsa_1024, ec_256 = issuer_keys()
    uid, specs, posts = secrets.token_hex(16), {}, []

    async def handle(request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        if request.method != "GET":
            posts.append(request.path)
            return web.json_response({"error": "nothing is posted here"}, status=400)
        if request.match_info["tail"] == "/view":
            return web.json_response(ShuffledView(cid, uid, specs[cid], 2, 0).to_dict())
        spec = specs[cid]
        return web.json_response({"id": cid, "uid": uid, "spec": spec.to_dict(), "fingerprint": spec.fingerprint})

    app = web.Application()
    app.router.add_route("*", "/collections/{cid}{tail:.*}", handle)
    runner, url = await start_site(app)
    try:
        key = {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": new_key_pair()[1].hex()}
        for cid, issuer_key in (("rsa1024", rsa_1024), ("ec", ec_256), ("junk", "A" * 100), ("good", rsa_2048)):
            shuffle = {"min_batch": 2, "delta": 0.25, "url": url, "key": key, "issuer_key": issuer_key}
            specs[cid] = CollectionSpec.from_dict({**SPEC.to_dict(), "shuffle": shuffle})
        ledger = tmp_path / "d.json"
        steps = [[cid, RECORD, str(ledger), None, 0, "a-code"] for cid in ("rsa1024", "ec", "junk")]
        steps += [["good", RECORD, str(ledger), None, 0, None], ["good", RECORD, str(ledger), None, 0, "a-code"]]
        outcomes = await js_device(built, url, tmp_path / "unused.json", steps, full=True, shuffler=url)
    finally:
        await runner.cleanup()
    assert outcomes[0].startswith("SpecError: the issuing key has 1024 bits; at least 2048"), outcomes
    not_rsa = "SpecError: the collection's issuing key is not an RSA public key"
    assert outcomes[1].startswith(not_rsa) and outcomes[2].startswith(not_rsa), outcomes
    assert outcomes[3].startswith("SpecError: collection 'good' takes reports only from enrolled people"), outcomes
    assert outcomes[4].startswith("RecordError: group"), outcomes  # the good key with a code: only now is the record read
    assert posts == [] and not ledger.exists()


async def test_a_node_device_keeps_its_token_before_it_sends_it_and_never_seals_its_code(built, tmp_path):
    """One loopback site as aggregator (issuing with a key of its own) and shuffler (refusing the
    first report): the report the device keeps is the sealed report with its token behind it, the
    token verifies with the Python participant's check, the code is nowhere inside the sealed
    report, and the device started again re-sends those very bytes without asking the issuer twice."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    issuer = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sealing_private, sealing_public = new_key_pair()
    uid, asked, posted, answers = secrets.token_hex(16), [], [], [400, 201]

    async def handle(request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        if request.method == "POST" and tail == "/tokens":
            asked.append(msgpack.unpackb(await request.read()))
            signed = blind_rsa.blind_sign(issuer, asked[-1]["request"][3:])
            return web.Response(body=msgpack.packb({"response": signed}), content_type="application/msgpack")
        if request.method == "POST" and tail == "/reports":
            posted.append(await request.read())
            status = answers.pop(0)
            return web.json_response({"status": "accepted"} if status == 201 else {"error": "not now"}, status=status)
        if tail == "/view":
            return web.json_response(view.to_dict())
        return web.json_response({"id": "c", "uid": uid, "spec": spec.to_dict(), "fingerprint": spec.fingerprint})

    app = web.Application()
    app.router.add_route("*", "/collections/c{tail:.*}", handle)
    runner, url = await start_site(app)
    try:
        key = {"id": 0, "kem": 32, "kdf": 1, "aead": 1, "public_key": sealing_public.hex()}
        issuer_key = tokens.encode_key(issuer.public_key())
        shuffle = {"min_batch": 2, "delta": 0.25, "url": url, "key": key, "issuer_key": issuer_key}
        spec = CollectionSpec.from_dict({**SPEC.to_dict(), "shuffle": shuffle})
        view = ShuffledView("c", uid, spec, 2, 0)
        ledger = tmp_path / "d.json"
        steps = [step("c", ledger, "the-code")]
        first = await js_device(built, url, tmp_path / "unused.json", steps, full=True, shuffler=url)
        assert first[0].startswith("ReportRejected: aggregator answered 400"), first
        stored, length = sealed_of(kept(ledger)), sealed_length(spec)
        assert len(stored) == length + tokens.token_length(view) and posted == [stored]  # kept before it was sent
        tokens.check(view, stored[:length], stored[length:])  # the Node device's token, checked in Python
        assert [a["code"] for a in asked] == ["the-code"]
        # The code went to the issuer alone: the sealed report holds no token field.
        assert "token" not in msgpack.unpackb(open_sealed(stored[:length], view, sealing_private))
        assert await js_device(built, url, tmp_path / "unused.json", steps, shuffler=url) == ["accepted"]
    finally:
        await runner.cleanup()
    assert posted == [stored, stored] and len(asked) == 1 and kept(ledger)["sent"]


async def test_the_node_devices_token_request_leaves_a_paced_time_after_the_spec_arrived(enrolled, built, tmp_path):
    """As in Python (tests/test_tokens.py): the token request is the first request after the draw,
    and leaves no sooner than the pace after the spec arrived."""
    site = enrolled
    cid = "paced"  # the collection of this test alone: the module shares one service
    codes, _ = create_enrolled(site, cid, min_batch=2, codes=1)
    warm, _ = create_enrolled(site, f"{cid}-warm", min_batch=2, codes=1)  # the process's first submit calibrates first
    async with Proxy(site.server.url) as front:
        steps = [step(f"{cid}-warm", tmp_path / "n.json", warm[0]), step(cid, tmp_path / "n.json", codes[0])]
        said = await js_device(built, front.url, tmp_path / "unused.json", steps, **node(site, pace=0.5, budget={"total": 8.0, "perDays": 30}))
    assert said == ["accepted", "accepted"]
    gap = front.first_seen[("POST", f"/collections/{cid}/tokens")] - front.first_seen[("GET", f"/collections/{cid}")]
    assert gap >= 0.5, gap
