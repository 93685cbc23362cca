"""``python -m shuffler serve``: run a shuffler between devices and an aggregator.

Every mistake is one line and exit code 2; the service prints ``listening on URL`` once it serves,
and on SIGTERM or SIGINT stops cleanly (:func:`serve`), logs one line and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from urllib.parse import urlsplit

from participant.usage import Parser, add_connection_options, non_negative_int, positive_int, positive_number, secret_line

DESCRIPTION = """\
A shuffler between devices and an aggregator. Devices send it their reports sealed to the
aggregator's key (it reads none of them); it stores each before acknowledging it, and releases a
collection's reports to the aggregator only in batches of at least the collection's min_batch
(and never fewer than --min-batch), each with the collection's dummies (and never fewer than
--dummies, by default as many as the floor) drawn here by the collection's own randomiser, in a
random order, every --interval seconds, presenting the token in --token-file. It pins each
collection's view (spec, uid, key, floor, dummies) the first time it is asked, publishes it
(GET /views), and devices report under that view alone. It keeps no address, header or arrival
time with a report, tells nobody how many wait, and answers a re-post of a forwarded report
alike whether it was a person's or a dummy. Run it as someone other than the aggregator's
operator: the anonymity it gives reports rests on that. Its own operator reads what waits with
python -m shuffler status --db FILE|URL.

The aggregator's operator creates the collection with this shuffler's URL and the same token:
  python -m aggregator create --spec spec.json --id survey --shuffler https://shuffler.example.org \\
      --shuffler-token-file token.txt --min-batch 1000
and the app pins this shuffler: Client(url, ledger=..., shuffler="https://shuffler.example.org").
"""

# Seconds a request under way when the shuffler is told to stop has to be answered; then its
# connection is closed (its device, unacknowledged, sends the same report again).
STOP_GRACE = 5.0
ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


def _url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"expected the aggregator's http(s) URL, got {text!r}")
    return text.strip().rstrip("/")


def _origin(text: str) -> str:
    origin = text.strip().rstrip("/").lower()
    if not ORIGIN.match(origin):
        raise argparse.ArgumentTypeError(f"an origin is scheme://host[:port] with no path, got {text!r}")
    return origin


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m shuffler", description="The shuffler between devices and an aggregator.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run the shuffler", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )  # fmt: skip
    serve.add_argument("--aggregator", type=_url, required=True, metavar="URL", help="the aggregator batches go to")
    serve.add_argument(
        "--token-file", required=True, metavar="FILE",
        help="file holding the token presented to the aggregator (its first line; readable by its owner only)",
    )  # fmt: skip
    serve.add_argument(
        "--db", required=True, metavar="FILE|URL",
        help="where reports wait: a SQLite file (created 0600; one shuffler process), or postgresql://… shared by "
        "several instances on several machines",
    )  # fmt: skip
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8081, help="port to listen on; 0 picks a free one (default 8081)")
    serve.add_argument(
        "--interval", type=positive_number, default=5.0, metavar="S",
        help="seconds between two releases of batches, whatever arrives (default 5)",
    )  # fmt: skip
    serve.add_argument(
        "--min-batch", type=positive_int, default=100, metavar="K",
        help="the fewest reports released at once, whatever a collection's spec asks (default 100)",
    )  # fmt: skip
    serve.add_argument(
        "--dummies", type=non_negative_int, default=None, metavar="M",
        help="the fewest dummy reports added to every batch, whatever a collection's spec asks (default: as many as "
        "the batch's floor); a person's report hides among them even if the aggregator sent every other report of "
        "the batch. Devices refuse a view with fewer than their app allows (by default as many as the floor)",
    )  # fmt: skip
    serve.add_argument(
        "--per-address", type=non_negative_int, default=600, metavar="N",
        help="reports a minute one address may send (default 600; 0: no limit)",
    )  # fmt: skip
    serve.add_argument(
        "--trusted-proxy", action="append", default=[], metavar="ADDRESS[/BITS]",
        help="a reverse proxy in front of the shuffler (repeat for several): a request from it is counted against "
        "the device address its X-Forwarded-For names (--per-address), and its connections are not capped per "
        "network; X-Forwarded-For from any other peer is ignored",
    )  # fmt: skip
    serve.add_argument(
        "--per-collection", type=non_negative_int, default=20_000, metavar="N",
        help="reports a second one collection may take (default 20000; 0: no limit)",
    )  # fmt: skip
    serve.add_argument(
        "--max-waiting", type=positive_int, default=1_000_000, metavar="N",
        help="reports of one collection that may wait for a batch (default 1000000)",
    )  # fmt: skip
    serve.add_argument(
        "--max-post", type=positive_int, default=1000, metavar="N",
        help="reports in one posted batch (default 1000); a device posts one",
    )  # fmt: skip
    serve.add_argument(
        "--allow-origin", action="append", default=[], type=_origin, metavar="ORIGIN",
        help="a web page whose visitors' browsers may send reports (repeat for several; default none)",
    )  # fmt: skip
    serve.add_argument(
        "--forget-after", type=positive_int, default=365, metavar="DAYS",
        help="days a released report is remembered, so that a re-send of it is a duplicate (default 365); a "
        "collection's are forgotten when it closes",
    )  # fmt: skip
    serve.add_argument(
        "--operator-token-file", metavar="FILE",
        help="file holding a token of this shuffler's operator alone (its first line; readable by its owner "
        "only; never the one the aggregator holds): GET /status with it tells what waits (python -m shuffler status)",
    )  # fmt: skip
    add_connection_options(serve)
    status = sub.add_parser(
        "status", help="what waits at this shuffler (its operator's view; nobody else is told)",
        description="Per collection pinned: its floor and dummies, the reports waiting (exact), the batches drawn "
        "and not yet acknowledged by the aggregator, the people's reports forwarded, whether it is closed. For the "
        "shuffler's operator alone: asked of the running service with the operator token given to serve "
        "(--operator-token-file), or read from the store itself; the service tells nobody else how many wait.",
    )  # fmt: skip
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", metavar="URL", help="the running shuffler (with --operator-token-file)")
    where.add_argument(
        "--db", metavar="FILE|URL",
        help="the store itself: a SQLite file no shuffler runs on (a running one holds it alone), or its PostgreSQL",
    )  # fmt: skip
    status.add_argument("--operator-token-file", metavar="FILE", help="the operator token serve was given (with --url)")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def read_token(path: str, option: str = "--token-file") -> str:
    """The token in ``path``'s first line; ValueError when the file cannot serve as one."""
    token = secret_line(path, option)
    if len(token) < 22 or not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ValueError("the token must be at least 22 visible ASCII characters (no spaces)")
    return token


async def serve(args) -> None:
    """Serve until SIGTERM or SIGINT, then stop cleanly: accept no more connections, answer the
    requests under way (or, after :data:`STOP_GRACE` seconds, close them unanswered), abandon the
    release round under way between two of its transactions, scrub the store's log and close it,
    and log one line. Nothing acknowledged is lost, and a batch forwarded but not acknowledged is
    forwarded again at the next start, as after a crash."""
    from aiohttp import web

    from participant.addresses import parse_networks, within
    from participant.serving import CappedRunner

    from .service import Settings, create_app
    from .store import StoreUnavailable, open_store

    if args.operator_token_file is not None and read_token(args.operator_token_file, "--operator-token-file") == read_token(args.token_file):
        raise ValueError("--operator-token-file must hold a token of its own, not the one the aggregator holds")
    trusted = parse_networks(args.trusted_proxy)
    settings = Settings(
        args.aggregator, read_token(args.token_file), args.min_batch, args.interval, tuple(args.allow_origin),
        args.dummies, args.per_address, args.per_collection, args.max_waiting, args.max_post,
        forget_after=args.forget_after, max_connections=args.max_connections,
        operator_token=None if args.operator_token_file is None else read_token(args.operator_token_file, "--operator-token-file"),
        max_connections_per_address=args.max_connections_per_address, keepalive_timeout=args.keepalive_timeout,
        body_timeout=args.body_timeout, trusted_proxies=trusted,
    )  # fmt: skip
    try:
        store = await open_store(args.db)
    except StoreUnavailable as exc:
        raise ValueError(f"--db: {exc}") from None
    runner = CappedRunner(
        create_app(settings, store), settings.max_connections, settings.max_connections_per_address,
        lambda peer: within(peer, trusted), access_log=None, keepalive_timeout=settings.keepalive_timeout,
        shutdown_timeout=STOP_GRACE,
    )  # fmt: skip
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port, backlog=2048)
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ValueError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = runner.addresses[0][:2]
    print(f"listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    received: list[str] = []
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, lambda name=signum.name: (received.append(name), stop.set()))
    try:
        await stop.wait()
    finally:
        # Stops accepting, answers or closes what is under way, then ends the release rounds and
        # lets go of the store (shuffler.service._running).
        await runner.cleanup()
    logging.getLogger("shuffler").info(
        "stopped on %s: requests answered or closed, every acknowledged report stored, the store closed", received[0]
    )


async def status(args) -> None:
    """Print what waits at the shuffler (its operator's view): asked of the running service with
    its operator token (``--url``), or read from a store no shuffler holds (``--db``: a stopped
    shuffler's SQLite file, or its PostgreSQL database at any time)."""
    if args.url is not None:
        rows = await _asked(args.url, read_token(args.operator_token_file, "--operator-token-file"))
        where = args.url
    else:
        rows, where = await _read(args.db)
    if args.json:
        print(json.dumps({"collections": rows}))
        return
    if not rows:
        print(f"{where}: no collection pinned")
    for row in rows:
        print(
            f"{row['id']}: {row['waiting']:,} waiting for a batch of {row['min_batch']:,} (and {row['dummies']:,} "
            f"dummies); {row['in_flight']:,} batches not yet acknowledged; {row['forwarded']:,} people's "
            f"reports forwarded" + ("; closed" if row["closed"] else "")
        )


async def _asked(url: str, token: str) -> list[dict]:
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async with session.get(f"{url}/status", headers={"Authorization": f"Bearer {token}"}) as answer:
                data = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ValueError(f"--url: the shuffler at {url} did not answer: {exc}") from None
    if answer.status != 200:
        raise ValueError(f"--url: the shuffler answered {answer.status}: {data.get('error') if isinstance(data, dict) else data}")
    return data["collections"]


async def _read(db: str) -> tuple[list[dict], str]:
    from .store import StoreUnavailable, open_store
    from .store.postgres import is_postgres_url

    if not is_postgres_url(db) and not os.path.isfile(db):
        raise ValueError(f"--db: no shuffler store at {db}")
    try:
        store = await open_store(db)
    except StoreUnavailable as exc:
        raise ValueError(f"--db: {exc}; ask the running shuffler with --url and --operator-token-file") from None
    try:
        return await store.operator_rows(), store.location
    finally:
        await store.shut()


def run(coroutine) -> None:
    """Run ``coroutine`` on uvloop where it is installed (the shuffler's extra brings it: a report
    costs the service about a sixth less CPU), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "status":
            if args.url is not None and args.operator_token_file is None:
                raise ValueError("--url needs --operator-token-file: the token serve was given")
            asyncio.run(status(args))
            return 0
        read_token(args.token_file)
        run(serve(args))
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
