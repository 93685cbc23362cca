"""``python -m aggregator serve``: run the aggregator service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from .app import create_app, open_store, start_site

DESCRIPTION = """\
Run the ldpnb aggregator: it publishes collection specs, stores one randomised report per
participant (SQLite, WAL, durable commits), keeps running statistics, and serves frequency
estimates and the Naive Bayes model once a collection has its minimum number of reports.
The aggregator never sees raw data: every report is already epsilon-LDP on the device."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aggregator", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service", description=DESCRIPTION)
    serve.add_argument(
        "--db", default="ldpnb.sqlite3", help="SQLite file, created on first start (default ldpnb.sqlite3)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    serve.add_argument(
        "--admin-token",
        default=os.environ.get("LDPNB_ADMIN_TOKEN"),
        help="admin bearer token (or $LDPNB_ADMIN_TOKEN); omitted, the stored one is kept, or one is "
        "generated and printed once on first start",
    )
    serve.add_argument(
        "--max-body", type=int, default=8 * 1024 * 1024, help="largest request body in bytes (default 8 MiB)"
    )
    serve.add_argument("--max-batch", type=int, default=10_000, help="most reports in one batch (default 10000)")
    serve.add_argument(
        "--rate-limit",
        type=int,
        default=0,
        help="reports one address may send to one collection per minute; beyond it 429 (default 0: no limit)",
    )
    return parser


async def serve(args) -> None:
    store, shown = open_store(args.db, args.admin_token)
    if shown:
        print(f"admin token (shown once; only its hash is stored): {shown}", flush=True)
    runner, url = await start_site(
        create_app(store, args.max_body, args.max_batch, args.rate_limit), args.host, args.port
    )
    print(f"ldpnb aggregator listening on {url} (database {os.path.abspath(args.db)}); Ctrl-C stops it", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        store.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
