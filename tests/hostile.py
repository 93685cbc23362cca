"""A hostile aggregator for shuffled collections: a proxy in front of a real one that answers some
requests as an attacker would (another uid or sealing key for one device, another floor for the
shuffler, a refused batch), and counts what passed through."""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter

import msgpack
from aiohttp import ClientSession, web

from aggregator.service.app import start_site
from participant.sealing import new_key_pair
from participant.spec import CollectionSpec


def rewritten(answer: dict, mode: str, uid: str, key: str) -> dict:
    """A collection's answer as the attacker shows it in ``mode``: ``uid`` (the uid ``uid``, the
    device's own), ``key`` (the sealing key ``key``, the device's own), ``floor`` (the spec's batch
    floor lowered to 2), ``plain`` (the spec without any ``shuffle`` block, under the uid ``uid``: a
    downgrade, so that the device reports to the aggregator directly)."""
    answer = dict(answer)
    if mode == "uid":
        answer["uid"] = uid
        return answer
    raw = json.loads(json.dumps(answer["spec"]))
    if mode == "key":
        raw["shuffle"]["key"]["public_key"] = key
    elif mode == "floor":
        raw["shuffle"]["min_batch"], raw["shuffle"]["delta"] = 2, 0.01
    elif mode == "plain":
        raw.pop("shuffle", None)
        answer["uid"] = uid
    spec = CollectionSpec.from_dict(raw)
    answer["spec"], answer["fingerprint"] = spec.to_dict(), spec.fingerprint
    return answer


class Proxy:
    """In front of the aggregator at ``target``: ``mode`` None passes everything through;
    otherwise collection answers are :func:`rewritten`. ``refuse`` holds collection ids whose
    shuffled batches are answered 413; the next ``lose`` shuffled batches reach the aggregator and
    their answers are lost (the connection cut). ``seen`` counts requests by (method, path), and
    ``first_seen`` notes when each first arrived;
    ``batches`` holds every shuffled batch posted through it (its decoded body), refused or not;
    with ``issuer_key`` (an RSA private key) token requests are answered with a blind signature
    under that key, not the collection's."""

    def __init__(self, target: str):
        self.target, self.mode, self.refuse, self.lose = target, None, set(), 0
        # What the liar tells its mark, the same at every request (a device's own uid or key).
        self.uid, self.key = secrets.token_hex(16), new_key_pair()[1].hex()
        self.seen: Counter = Counter()
        self.first_seen: dict[tuple[str, str], float] = {}  # when each (method, path) first arrived (monotonic)
        self.batches: list[dict] = []
        self.issuer_key = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen[(request.method, request.path)] += 1
        self.first_seen.setdefault((request.method, request.path), time.monotonic())
        parts = request.path.strip("/").split("/")
        if request.path.endswith("/shuffled") and request.method == "POST":
            self.batches.append(msgpack.unpackb(await request.read()))
        if request.path.endswith("/tokens") and request.method == "POST" and self.issuer_key is not None:
            from participant.blind_rsa import blind_sign

            asked = msgpack.unpackb(await request.read())
            n = self.issuer_key.public_key().public_numbers().n  # what it signs: below its own modulus
            blinded = (int.from_bytes(asked["request"][3:], "big") % n).to_bytes((n.bit_length() + 7) // 8, "big")
            signed = blind_sign(self.issuer_key, blinded)
            return web.Response(body=msgpack.packb({"response": signed}), content_type="application/msgpack")
        if request.path.endswith("/shuffled") and parts[1] in self.refuse:
            return web.json_response({"error": "refused by the test"}, status=413)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self.session.request(request.method, self.target + request.path_qs, data=await request.read(),
                                        headers=headers, allow_redirects=False) as answer:  # fmt: skip
            body, status = await answer.read(), answer.status
            passed = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "access-control-allow-origin", "vary", "etag")}
        if request.path.endswith("/shuffled") and self.lose > 0:
            self.lose -= 1
            request.transport.abort()  # counted there, and the answer never arrives
            return web.Response(status=500)
        is_answer = request.method == "GET" and len(parts) == 2 and parts[0] == "collections" and status == 200
        if self.mode is not None and is_answer:
            packed = "msgpack" in answer.content_type
            data = rewritten(msgpack.unpackb(body) if packed else json.loads(body), self.mode, self.uid, self.key)
            body = msgpack.packb(data) if packed else json.dumps(data).encode()
            passed = {k: v for k, v in passed.items() if k.lower() != "etag"}
        return web.Response(body=body, status=status, headers=passed)

    async def __aenter__(self) -> Proxy:
        self.session = ClientSession()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner, self.url = await start_site(app)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()
        await self.session.close()
