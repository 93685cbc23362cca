"""Anonymous tokens for shuffled collections that take reports only from enrolled people, against
real processes on loopback (the aggregator as issuer, the shuffler checking tokens, Python
devices): every enrolled person counted once; a report whose token is missing, forged, of another
key, collection or report is refused at the shuffler with one line and nothing batched; a code
obtains one token (the same request again, the same answer); the aggregator never sees a token;
an issuer that logs its whole transcript cannot tell which issuance a token came from; a device
never keeps a token under a key other than its view's."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import urllib.error
import urllib.request

import msgpack
import pytest
from scipy import stats

from participant import AsyncClient, Limits, ReportRejected, SpecError, blind_rsa, tokens
from participant.blind_rsa import BlindSignatureError
from participant.ledger import Ledger
from participant.sealing import open_raw, private_key, sealed_length
from participant.view import ShuffledView

from .hostile import Proxy
from .servers import AUTH, Server, ShufflerProcess, token_file, waiting_at
from .test_shuffled_guarantee import sealed_under
from .test_shuffler import RECORD, SPEC, call, counted, wait_for

LIMITS = Limits(min_batch=2, min_dummy_share=0)


def create_enrolled(server: Server, cid: str, shuffler: str, token: str, min_batch: int, codes: int = 0) -> list[str]:
    """A shuffled collection taking reports only from enrolled people; ``codes`` one-time codes for it."""
    body = {"spec": SPEC.to_dict(), "id": cid, "min_reports": 1, "enrollment": True,
            "shuffler": {"url": shuffler, "token": token, "min_batch": min_batch, "dummies": 0}}  # fmt: skip
    call(f"{server.url}/collections", "POST", body, AUTH)
    return call(f"{server.url}/collections/{cid}/enrollments", "POST", {"count": codes}, AUTH)["tokens"] if codes else []


def posted(url: str, body: bytes, ctype: str = "application/ldpnb-sealed") -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def issue(server: Server, cid: str, code, request) -> tuple[int, dict]:
    body = msgpack.packb({"code": code, "request": request})
    req = urllib.request.Request(f"{server.url}/collections/{cid}/tokens", data=body, method="POST",
                                 headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, msgpack.unpackb(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def tokened(server: Server, view: ShuffledView, code: str) -> tuple[bytes, bytes]:
    """A sealed report of ``view`` and the token ``code`` obtains for it, as a device makes them."""
    sealed = sealed_under(view)
    request, inverse = tokens.token_request(view, sealed)
    status, answer = issue(server, view.collection, code, request)
    assert status == 200, answer
    return sealed, tokens.finish(view, sealed, answer["response"], inverse)


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory):
    """A real aggregator and shuffler: ``(aggregator, shuffler, token)``, shared by this module's
    tests (starting the pair costs about two seconds of CPU), each under collection ids of its own;
    the shuffler's token file is ``shuffler.token_file``."""
    tmp_path = tmp_path_factory.mktemp("enrolled")
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3",
                               "--min-batch", "2", "--dummies", "0", "--per-address", "0").start()  # fmt: skip
    yield server, shuffler, token
    shuffler.stop()
    server.stop()


async def test_enrolled_people_are_counted_once_and_nothing_else_is_batched(enrolled, tmp_path):
    server, shuffler, token = enrolled
    codes = create_enrolled(server, "t1", shuffler.url, token, min_batch=3, codes=6)
    other_codes = create_enrolled(server, "u1", shuffler.url, token, min_batch=3, codes=1)
    view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/t1/view"))
    other = ShuffledView.from_dict(call(f"{shuffler.url}/collections/u1/view"))
    assert view.spec.shuffle.issuer_key != other.spec.shuffle.issuer_key  # one issuing key per collection
    # Every kind of token that is not this report's is refused before anything waits, in one line.
    sealed, token_t = tokened(server, view, codes[0])
    sealed_u, token_u = tokened(server, other, other_codes[0])
    forged = token_t[: tokens.INPUT_BYTES] + os.urandom(len(token_t) - tokens.INPUT_BYTES)
    another = sealed_under(view)
    url = f"{shuffler.url}/collections/t1/reports"
    for body, why in [
        (sealed, "none came"),
        (sealed + forged, "does not verify"),
        (another + token_t, "another report"),
        (sealed + token_u, "another key"),
        (sealed + token_t[:-1], "not a sealed report"),
        (sealed + token_t[:1] + b"\x03" + token_t[2:], "not of type 2"),
    ]:
        status, answer = posted(url, body)
        assert status == 400 and why in answer["error"] and "\n" not in answer["error"], (why, answer)
    batch = msgpack.packb({"reports": [sealed + forged, another + token_t, sealed_u + token_u]})
    status, answer = posted(url, batch, "application/msgpack")
    assert status == 200 and answer["rejected"] == 3
    # Enrolled devices, each with its code: counted once each, re-sends duplicates.
    assert posted(url, sealed + token_t) == (201, {"status": "accepted"})
    assert posted(url, sealed + token_t) == (200, {"status": "duplicate"})
    for i, code in enumerate(codes[1:3]):
        async with AsyncClient(server.url, ledger=tmp_path / f"d{i}.json", pace=0.001, shuffler=shuffler.url, limits=LIMITS) as device:
            assert await device.submit("t1", RECORD, token=code) == "accepted"
    await asyncio.to_thread(wait_for, lambda: counted(server, "t1") == 3)
    assert call(f"{server.url}/collections/t1/status", headers=AUTH)["batches"]["junk"] == 0
    # A used code obtains nothing more, and a device without a code sends nothing.
    async with AsyncClient(server.url, ledger=tmp_path / "e.json", pace=0.001, shuffler=shuffler.url, limits=LIMITS, retries=0) as device:
        with pytest.raises(ReportRejected, match="409.*one token per code"):
            await device.submit("t1", RECORD, token=codes[1])
    async with AsyncClient(server.url, ledger=tmp_path / "f.json", pace=0.001, shuffler=shuffler.url, limits=LIMITS) as device:
        with pytest.raises(SpecError, match="only from enrolled people"):
            await device.submit("t1", RECORD)
    assert not Ledger(tmp_path / "f.json").entries()
    await asyncio.sleep(1.0)
    assert counted(server, "t1") == 3


async def test_a_code_obtains_one_token_and_the_same_request_again_the_same_answer(enrolled):
    server, shuffler, token = enrolled
    codes = create_enrolled(server, "t2", shuffler.url, token, min_batch=3, codes=2)
    foreign = create_enrolled(server, "u2", shuffler.url, token, min_batch=3, codes=1)[0]
    view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/t2/view"))
    request, _ = tokens.token_request(view, sealed_under(view))
    first = issue(server, "t2", codes[0], request)
    assert first[0] == 200 and issue(server, "t2", codes[0], request) == first  # an answer lost: asked again
    again, _ = tokens.token_request(view, sealed_under(view))
    assert issue(server, "t2", codes[0], again)[0] == 409
    size = blind_rsa.modulus_bytes(tokens.issuing_key(view.spec.shuffle.issuer_key))
    for code, body, status, reason in [
        (foreign, request, 403, "bad_code"),
        ("A" * 43 + "=", request, 403, "bad_code"),
        (codes[1], request[:-1], 400, "malformed"),
        (codes[1], b"\x00\x01" + request[2:], 400, "malformed"),
        (codes[1], request[:2] + bytes([request[2] ^ 1]) + request[3:], 400, "another_key"),
        (codes[1], request[:3] + b"\xff" * size, 400, "malformed"),  # not below the modulus
        (codes[1], "not base64 !", 400, "malformed"),
    ]:
        got = issue(server, "t2", code, body)
        assert got[0] == status and got[1]["reason"] == reason, got
    assert issue(server, "t2", codes[1], request)[0] == 200  # a refused request spent nothing
    # A collection without enrollment issues nothing.
    body = {"spec": SPEC.to_dict(), "id": "open2", "shuffler": {"url": shuffler.url, "token": token, "min_batch": 3}}
    call(f"{server.url}/collections", "POST", body, AUTH)
    assert issue(server, "open2", codes[1], request)[0] == 409


async def test_the_aggregator_never_sees_a_token_and_the_issuer_cannot_tell_which_issuance_a_token_came_from(tmp_path):
    """The batches the aggregator receives hold sealed reports alone, of one length, the dummies'
    and the people's alike. And were the issuer, which logged every request and answer, shown
    every token: each token is consistent with each issuance (for every pair a blind exists that
    makes it so), so no matching beats chance; the matcher that pairs tokens with issuances by
    the order of their arrival at the issuer does no better than chance over many collections."""
    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    try:
        async with Proxy(server.url) as front:
            shuffler = ShufflerProcess(tmp_path / "s.sqlite3", front.url, tmp_path / "token.txt", "--interval", "0.3",
                                       "--min-batch", "2", "--per-address", "0").start()  # fmt: skip
            try:
                codes = create_enrolled(server, "t", shuffler.url, token, min_batch=8, codes=8)
                # Off the event loop: the proxy the shuffler pins through runs on it.
                view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{shuffler.url}/collections/t/view"))
                made = [tokened(server, view, code) for code in codes]
                random.shuffle(made)
                for sealed, token_ in made:
                    assert (await asyncio.to_thread(posted, f"{shuffler.url}/collections/t/reports", sealed + token_))[0] == 201
                await asyncio.to_thread(wait_for, lambda: len(front.batches) == 1)
                batch = front.batches[0]
                assert batch["dummies"] == 8 and len(batch["reports"]) == 16
                assert {len(r) for r in batch["reports"]} == {sealed_length(view.spec)}
                held = b"".join(batch["reports"])
                assert not any(t[tokens.INPUT_BYTES :] in held or t[2:34] in held for _, t in made)
                # Opened, a device's report carries no code either: nothing that names a person.
                created = create_enrolled(server, "v", shuffler.url, token, min_batch=2, codes=2)
                for i, code in enumerate(created):
                    async with AsyncClient(server.url, ledger=tmp_path / f"d{i}.json", pace=0.001, shuffler=shuffler.url,
                                           limits=Limits(min_batch=2, min_dummy_share=1)) as device:  # fmt: skip
                        assert await device.submit("v", RECORD, token=code) == "accepted"
                await asyncio.to_thread(wait_for, lambda: len(front.batches) == 2)
            finally:
                shuffler.stop()
        with sqlite3.connect(tmp_path / "aggregator.sqlite3") as conn:
            (keys,) = conn.execute("SELECT value FROM settings WHERE key = 'sealing_keys'").fetchone()
        private = bytes.fromhex(json.loads(keys)[-1]["private"])
        opened = [msgpack.unpackb(open_raw(item, item[:32], len(item), private_key(private))) for item in front.batches[1]["reports"]]
        assert len(opened) == 4 and all("token" not in report for report in opened)
        assert not any(code.encode() in msgpack.packb(report) for code in created for report in opened)
    finally:
        server.stop()
    # The issuer's view, with its private key: every (request, token) pair is consistent.
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    n, e, d = key.public_key().public_numbers().n, 65537, key.private_numbers().d
    log, kept = [], []
    for _ in range(6):
        message = os.urandom(98)
        blinded, inverse = blind_rsa.blind(key.public_key(), message)
        signed = blind_rsa.blind_sign(key, blinded)
        log.append(int.from_bytes(blinded, "big"))
        kept.append(int.from_bytes(blind_rsa.finalize(key.public_key(), message, signed, inverse), "big"))
    for blinded in log:
        for signature in kept:
            encoded = pow(signature, e, n)  # the token's PSS encoding, as the issuer recovers it
            r = pow(blinded * pow(encoded, -1, n) % n, d, n)  # the blind that would pair them
            assert pow(r, e, n) * encoded % n == blinded
    # Pairing by order of issuance, over 300 collections of 6 people who redeem in a random order.
    rng = random.Random(5)
    hits = sum(rng.sample(range(6), 6)[0] == 0 for _ in range(300))
    assert stats.binomtest(hits, 300, 1 / 6).pvalue > 1e-3


async def test_a_device_keeps_no_token_of_another_key_and_re_asks_its_pending_request_after_a_stop(tmp_path):
    """An issuer answering with a signature under a key of its own (so that the token would tag
    the device) is refused: nothing is sent, the token is not kept. A device stopped after it
    wrote its request asks the very same request again and is answered the same."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    try:
        async with Proxy(server.url) as front:
            shuffler = ShufflerProcess(tmp_path / "s.sqlite3", server.url, tmp_path / "token.txt", "--interval", "0.3",
                                       "--min-batch", "2", "--dummies", "0").start()  # fmt: skip
            try:
                codes = create_enrolled(server, "t", shuffler.url, token, min_batch=2, codes=3)
                front.issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                async with AsyncClient(front.url, ledger=tmp_path / "d.json", pace=0.001, shuffler=shuffler.url,
                                       limits=LIMITS, retries=0) as device:  # fmt: skip
                    # (Under another modulus the signature may not even lie below this one: refused either way.)
                    with pytest.raises(BlindSignatureError, match="does not verify|not below the modulus"):
                        await device.submit("t", RECORD, token=codes[0])
                assert waiting(shuffler) == 0
                entry = next(iter(Ledger(tmp_path / "d.json").entries().values()))
                assert entry["sent"] is False
                # Stopped after the request was written: the ledger holds sealed ‖ request ‖ inverse.
                view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/t/view"))
                length = sealed_length(view.spec)
                import base64

                kept = base64.b64decode(entry["sealed"])
                assert len(kept) == length + 3 + 2 * 256
                front.issuer_key = None  # the issuer honest now: the same request gets the same answer
                first = issue(server, "t", codes[0], kept[length : length + 3 + 256])
                assert first[0] == 200
                # The same origin as before (the same collection under another would be refused as
                # reported: the same request at two origins would link them).
                async with AsyncClient(front.url, ledger=tmp_path / "d.json", pace=0.001, shuffler=shuffler.url, limits=LIMITS) as device:
                    assert await device.submit("t", RECORD, token=codes[0]) == "accepted"
                async with AsyncClient(server.url, ledger=tmp_path / "e.json", pace=0.001, shuffler=shuffler.url, limits=LIMITS) as device:
                    assert await device.submit("t", RECORD, token=codes[1]) == "accepted"
                await asyncio.to_thread(wait_for, lambda: counted(server, "t") == 2)
            finally:
                shuffler.stop()
    finally:
        server.stop()


def waiting(shuffler: ShufflerProcess) -> int:
    return waiting_at(shuffler.db)


async def test_two_instances_on_postgresql_take_a_tokened_report_once(tmp_path, postgres):
    """The same tokened report posted to two shuffler instances sharing one PostgreSQL at once, and
    again after its batch left: one ``accepted`` in all, every other answer ``duplicate`` (a
    re-send is never a spent token), the person counted once."""
    from .conftest import fresh_postgres_url

    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    url = fresh_postgres_url(postgres)
    instances = [
        ShufflerProcess(url, server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0",
                        "--per-address", "0")  # fmt: skip
        for _ in range(2)
    ]
    try:
        for instance in instances:
            await asyncio.to_thread(instance.start)
        codes = create_enrolled(server, "t", instances[0].url, token, min_batch=2, codes=2)
        view = ShuffledView.from_dict(call(f"{instances[0].url}/collections/t/view"))
        made = [tokened(server, view, code) for code in codes]
        body = made[0][0] + made[0][1]
        answers = await asyncio.gather(*(
            asyncio.to_thread(posted, f"{instance.url}/collections/t/reports", body) for instance in instances * 4
        ))  # fmt: skip
        assert sorted(status for status, _ in answers) == [200] * 7 + [201], answers
        assert (await asyncio.to_thread(posted, f"{instances[1].url}/collections/t/reports", made[1][0] + made[1][1]))[0] == 201
        await asyncio.to_thread(wait_for, lambda: counted(server, "t") == 2)
        again = [posted(f"{instance.url}/collections/t/reports", body)[0] for instance in instances]
        assert again == [200, 200]
        await asyncio.sleep(1.0)
        assert counted(server, "t") == 2
    finally:
        for instance in instances:
            instance.stop()
        server.stop()


async def test_the_operator_creates_an_enrolled_shuffled_collection_and_hands_out_codes_from_the_command_line(enrolled, tmp_path):
    """``aggregator create --enrollment --shuffler`` and ``aggregator enroll`` work for a shuffled
    collection: its spec names an issuing key, and each code written obtains one token."""
    import subprocess
    import sys

    from .servers import ADMIN

    server, shuffler, token = enrolled
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC.to_dict()))
    env = {**os.environ, "LDPNB_ADMIN_TOKEN": ADMIN}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aggregator", *args, "--url", server.url], capture_output=True,
                              text=True, timeout=120, env=env, check=False)  # fmt: skip

    made = await asyncio.to_thread(cli, "create", "--spec", str(spec_file), "--id", "cli", "--min-reports", "1",
                                   "--shuffler", shuffler.url, "--shuffler-token-file", shuffler.token_file,
                                   "--min-batch", "2", "--dummies", "0", "--enrollment")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert call(f"{server.url}/collections/cli")["spec"]["shuffle"]["issuer_key"]
    out = tmp_path / "codes.txt"
    handed = await asyncio.to_thread(cli, "enroll", "cli", "--count", "2", "--out", str(out))
    assert handed.returncode == 0 and "wrote 2 tokens" in handed.stdout, handed.stderr
    codes = out.read_text().split()
    view = ShuffledView.from_dict(call(f"{shuffler.url}/collections/cli/view"))
    for code in codes:
        sealed, token_ = tokened(server, view, code)
        assert posted(f"{shuffler.url}/collections/cli/reports", sealed + token_)[0] == 201
    await asyncio.to_thread(wait_for, lambda: counted(server, "cli") == 2)


async def test_the_token_request_leaves_a_paced_time_after_the_spec_arrived(enrolled, tmp_path):
    """The request that follows the draw is the token request: it leaves no sooner than the pace
    after the spec arrived (a lower bound, which load only makes later), so its moment does not
    carry the draw's time, which follows the input and noise drawn (it left right after the draw:
    an outside review told which input a person reported, AUC 0.80, on a SHE spec)."""
    server, shuffler, token = enrolled
    codes = create_enrolled(server, "t3", shuffler.url, token, min_batch=2, codes=1)
    call(f"{shuffler.url}/collections/t3/view")  # pinned: the device's view is a quick answer
    async with Proxy(server.url) as front:
        async with AsyncClient(front.url, ledger=tmp_path / "d.json", pace=0.5, shuffler=shuffler.url, limits=LIMITS) as device:
            assert await device.submit("t3", RECORD, token=codes[0]) == "accepted"
    gap = front.first_seen[("POST", "/collections/t3/tokens")] - front.first_seen[("GET", "/collections/t3")]
    assert gap >= 0.5, gap
