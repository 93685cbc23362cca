"""What anonymous tokens cost (issue: shuffled collections count only enrolled people), in one run.

    python bench/tokens.py [--people 5000] [--concurrency 64] [--rounds 3] [--issuances 2000]

- *issuance*: the issuer's private operation alone (RSA-2048, base blinded and checked), and
  tokens obtained over HTTP from a real ``python -m aggregator serve`` (16 in flight, each
  request a device's TokenRequest with its own code);
- *verification at the shuffler*: :func:`participant.tokens.check` of one report (the aggregator
  never sees a token: it verifies none);
- *the shuffled path*: ``--people`` sealed reports posted one per request (``--concurrency`` in
  flight) to a real ``python -m shuffler serve`` before a real aggregator, into a collection with
  tokens (each report followed by the token its code obtained before the round) and one without,
  with the default dummies (as many as the floor) and with none,
  each until the shuffler answered every post (intake) and until the aggregator counted every
  person (end to end, the collection closed with pad after the last post); every round checks that the people counted equal the people sent and that
  no report was junk before it reports a rate. The rounds alternate which collection goes first.

Writes ``bench/results/tokens.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import msgpack
from ingest import drive_raw, reports, spec, start

from participant import blind_rsa, tokens
from participant.sealing import seal
from participant.view import ShuffledView
from participant.wire import pack_report

RESULTS = Path(__file__).with_name("results") / "tokens.md"
# The dummies of the collections measured: the shuffler's default (as many as the floor), and none.
ARMS = ("default", "none")


def call(url: str, method: str = "GET", body=None, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers), timeout=300) as answer:
        return json.load(answer)


def private_operation(n: int = 200) -> float:
    """Seconds per blind signature, RSA-2048, the issuer's step alone."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    blinded = [blind_rsa.blind(key.public_key(), os.urandom(98))[0] for _ in range(n)]
    start = time.perf_counter()
    for item in blinded:
        blind_rsa.blind_sign(key, item)
    return (time.perf_counter() - start) / n


def verification(view: ShuffledView, made: list[tuple[bytes, bytes]]) -> float:
    """Seconds per token checked as the shuffler checks it."""
    start = time.perf_counter()
    for sealed, token in made:
        tokens.check(view, sealed, token)
    return (time.perf_counter() - start) / len(made)


async def issued(url: str, cid: str, view: ShuffledView, sealed: list[bytes], codes: list[str], concurrency: int = 16):
    """Each sealed report's token, obtained over HTTP with its own code; and the seconds it took."""
    pending = list(enumerate(zip(sealed, codes)))
    out: list[bytes | None] = [None] * len(sealed)

    async def worker(session):
        while pending:
            i, (item, code) = pending.pop()
            request, inverse = tokens.token_request(view, item)
            body = msgpack.packb({"code": code, "request": request})
            async with session.post(f"{url}/collections/{cid}/tokens", data=body,
                                    headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"}) as r:  # fmt: skip
                assert r.status == 200, await r.text()
                out[i] = tokens.finish(view, item, msgpack.unpackb(await r.read())["response"], inverse)

    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return out, time.perf_counter() - start


async def counted_all(url: str, admin: str, cid: str, people: int, timeout: float = 1800.0) -> None:
    """Return once the aggregator counted ``people`` people in ``cid``; fail at once on junk."""
    deadline = time.monotonic() + timeout
    while True:
        counted, junk = await asyncio.to_thread(people_counted, url, admin, cid)
        if junk:
            raise RuntimeError(f"{cid}: {junk} reports did not open at the aggregator (junk): no rate reported")
        if counted >= people:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{cid}: {counted} of {people} people counted after {timeout:g} s")
        await asyncio.sleep(0.1)


def people_counted(url: str, admin: str, cid: str) -> tuple[int, int]:
    """``(people counted, junk)`` of a shuffled collection: its reports less its batches' dummies."""
    status = call(f"{url}/collections/{cid}/status", token=admin)
    return status["reports"] - status["batches"]["dummies"], status["batches"]["junk"]


async def one_round(
    url: str, shuffler: str, admin: str, token: str, cid: str, bodies: list[bytes], concurrency: int
) -> tuple[float, float]:
    """``(intake s, end-to-end s)`` of posting ``bodies`` (one person each) to the shuffler, then
    closing the collection with pad (the last people, fewer than a batch, leave with it)."""
    start = time.perf_counter()
    intake = await drive_raw(shuffler, f"/collections/{cid}/reports", bodies, concurrency, "application/ldpnb-sealed")
    await asyncio.to_thread(call, f"{shuffler}/collections/{cid}/close", "POST", {"pad": True}, token)
    await counted_all(url, admin, cid, len(bodies))
    total = time.perf_counter() - start
    people, junk = await asyncio.to_thread(people_counted, url, admin, cid)
    if people != len(bodies) or junk:
        raise RuntimeError(f"{cid}: {people} people counted of {len(bodies)} sent, {junk} junk: no rate reported")
    return intake, total


async def main_async(args) -> list[str]:
    s = spec()
    admin, token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    drawn = reports(s, args.people)
    lines = []
    per_sign = private_operation()
    with tempfile.TemporaryDirectory() as tmp:
        token_path = Path(tmp) / "token.txt"
        token_path.write_text(token + "\n")
        token_path.chmod(0o600)
        rates: dict[str, list[float]] = {}
        issuance, checks = [], []
        for r in range(args.rounds):
            agg, url = start([sys.executable, "-m", "aggregator", "serve", "--db", f"{tmp}/a{r}.sqlite3", "--port", "0"],
                             env={**os.environ, "LDPNB_ADMIN_TOKEN": admin})  # fmt: skip
            shuf, shuffler = start([
                sys.executable, "-m", "shuffler", "serve", "--aggregator", url, "--token-file", str(token_path), "--db",
                f"{tmp}/s{r}.sqlite3", "--port", "0", "--interval", "0.2", "--min-batch", "2", "--dummies", "0",
                # (--dummies 0: each collection's own dummies decide, the default share or none)
                "--per-address", "0", "--per-collection", "0", "--max-post", "5000",
            ])  # fmt: skip
            try:
                arms = []
                for dummies in ARMS:
                    for enrolled in (False, True):
                        cid = f"{'tokens' if enrolled else 'plain'}-{dummies}"
                        block = {"url": shuffler, "token": token, "min_batch": args.min_batch}
                        if dummies == "none":
                            block["dummies"] = 0
                        call(f"{url}/collections", "POST", {"spec": s.to_dict(), "id": cid, "min_reports": 0,
                                                            "enrollment": enrolled, "shuffler": block}, admin)  # fmt: skip
                        view = ShuffledView.from_dict(call(f"{shuffler}/collections/{cid}/view"))
                        # Packed for the spec the view holds (its shuffle block is part of the spec's digest).
                        bodies = [seal(pack_report(report, view.spec), view) for report in drawn]
                        if enrolled:
                            codes = []
                            while len(codes) < args.people:
                                n = min(10_000, args.people - len(codes))
                                codes += call(f"{url}/collections/{cid}/enrollments", "POST", {"count": n}, admin)["tokens"]
                            timed = min(args.issuances, args.people)
                            made, seconds = await issued(url, cid, view, bodies[:timed], codes)
                            issuance.append(timed / seconds)
                            made += (await issued(url, cid, view, bodies[timed:], codes[timed:], 64))[0]
                            checks.append(verification(view, list(zip(bodies[:2000], made[:2000]))))
                            bodies = [sealed + t for sealed, t in zip(bodies, made)]
                        arms.append((cid, bodies))
                for cid, posted in arms if r % 2 == 0 else arms[::-1]:
                    intake, total = await one_round(url, shuffler, admin, token, cid, posted, args.concurrency)
                    rates.setdefault(f"{cid}: intake", []).append(len(posted) / intake)
                    rates.setdefault(f"{cid}: until counted", []).append(len(posted) / total)
            finally:
                for proc in (shuf, agg):
                    proc.terminate()
                    proc.wait(30)
    median = {k: statistics.median(v) for k, v in rates.items()}
    lines += [
        f"{args.people:,} people a collection, {args.rounds} rounds, {args.concurrency} in flight, floor {args.min_batch}, "
        "SQLite; medians; every round checked people counted = people sent, junk 0",
        "",
        "| what | figure |",
        "|---|---|",
        f"| issuer's private operation (RSA-2048, base blinded, checked) | {per_sign * 1e3:.2f} ms, {1 / per_sign:,.0f}/s on one core |",
        f"| tokens issued over HTTP (16 in flight, a code each) | {statistics.median(issuance):,.0f}/s |",
        f"| a token checked at the shuffler | {statistics.median(checks) * 1e6:,.0f} µs |",
        "| a token checked at the aggregator | none: tokens stop at the shuffler |",
    ]
    for dummies in ARMS:
        for what in ("intake", "until counted"):
            plain, with_tokens = median[f"plain-{dummies}: {what}"], median[f"tokens-{dummies}: {what}"]
            lines.append(
                f"| shuffled people/s ({'no' if dummies == 'none' else dummies} dummies), {what}: without tokens, with | {plain:,.0f}, "
                f"{with_tokens:,.0f} ({1 - with_tokens / plain:+.1%} cost) |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-batch", type=int, default=1000)
    parser.add_argument("--issuances", type=int, default=2000, help="tokens whose issuance over HTTP is timed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    lines = asyncio.run(main_async(args))
    text = "# Anonymous tokens: what they cost\n\n" + "\n".join(lines) + "\n\nWritten by `python bench/tokens.py`.\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
