"""``python -m aggregator``: run the aggregator service (``serve``) and move a database (``copy``)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import socket
import sqlite3
import sys
from pathlib import Path

from participant.spec import EPSILON_RANGE
from participant.usage import (
    Parser, add_connection_options, folded, non_negative_int, number, positive_int, positive_number, secret_line, share,
)
from protocols import PROTOCOL_NAMES

from ..store.defaults import DEFAULT_POOL, DEFAULT_TIMEOUT, POSTGRES_WRITE_LANES
from .commands import COMMANDS as OPERATOR_COMMANDS
from .commands import OperatorError
from .commands import add_parsers as add_operator_parsers
from .commands import run as run_operator
from .privacy import add_parser as add_privacy_parser
from .privacy import run as run_privacy

# The service's machinery (aiohttp's server, the stores and their drivers) is imported in
# main(), after the options are parsed: `--help` and the operator's commands do without it.

DESCRIPTION = """\
Run the ldpnb aggregator (serve), move its database (copy), or operate a running one (create,
list, status, model, enroll). The service: it publishes collection specs, stores one randomised report per
participant, keeps running statistics, and serves frequency estimates and the Naive Bayes model
once a collection has its minimum number of reports. The aggregator never sees raw data: every
report is already epsilon-LDP on the device.

The database is a SQLite file (one process) or a PostgreSQL URL (any number of processes and
machines, each started with the same --db). The admin token is read from $LDPNB_ADMIN_TOKEN or
--admin-token-file, never from the command line; omitted on first start, one is generated and
printed once."""


class UsageError(Exception):
    """Bad use of the command line: printed as one line, exit code 2."""


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one). The resolver would otherwise take a
    larger number modulo 65536 and listen somewhere the operator never asked for."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port lies in 0-65535, got {text}")
    return value


def _pool_size(text: str) -> int:
    size = positive_int(text)
    if size <= POSTGRES_WRITE_LANES:
        raise argparse.ArgumentTypeError(
            f"must be at least {POSTGRES_WRITE_LANES + 1} (one connection per write lane and one for reads), got {text}"
        )
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m aggregator",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the HTTP service",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # "--admin-token" must not pass for "--admin-token-file"
    )
    serve.add_argument(
        "--db",
        help="SQLite file (created on first start) or postgresql://USER@HOST:PORT/DB (default $LDPNB_DB, else "
        "ldpnb.sqlite3); a password here shows in the process list: use --db-file or $LDPNB_DB for one",
    )
    serve.add_argument(
        "--db-file",
        metavar="FILE",
        help="read the database address from the first line of FILE (keep it mode 0600), so that no password "
        "appears in the process list",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes serving one port (PostgreSQL only; default 1)",
    )
    serve.add_argument(
        "--admin-token-file",
        help="file holding the admin bearer token (else $LDPNB_ADMIN_TOKEN; at least 22 visible ASCII characters)",
    )
    serve.add_argument(
        "--rotate-admin-token",
        action="store_true",
        help="replace the admin token stored in the database by the one given (without it a different one is refused)",
    )
    serve.add_argument(
        "--max-body", type=positive_int, default=8 * 1024 * 1024, help="largest request body in bytes (default 8 MiB)"
    )
    serve.add_argument("--max-batch", type=positive_int, default=10_000, help="most reports in one batch (default 10000)")
    serve.add_argument(
        "--open-processes", type=positive_int, metavar="N",
        help="processes that open shuffled batches' sealed reports, per worker (default: the cores, shared among the workers)",
    )  # fmt: skip
    serve.add_argument(
        "--max-state",
        type=positive_int,
        default=1_000_000,
        help="most statistics entries per collection (sum of its inputs' domain sizes; default 1000000)",
    )
    serve.add_argument(
        "--rate-limit",
        type=non_negative_int,
        default=0,
        help="reports one address may send to one collection per minute; beyond it 429 (default 0: no limit)",
    )
    serve.add_argument(
        "--metrics-per-collection",
        action="store_true",
        help="label /metrics series with collection ids (default: totals only, ids stay private)",
    )
    add_connection_options(serve)
    serve.add_argument(
        "--slot-prefix",
        type=slot_prefix,
        default=(24, 64),
        metavar="V4[,V6]",
        help="the network prefix peers share connection slots by: IPv4 /16 to /32, IPv6 /48 to /64 (default 24,64: "
        "one /24 is one party; 32 gives each IPv4 address its own --max-connections-per-address)",
    )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS[/BITS]",
        help="a load balancer in front of the service (repeat for several): requests from it are counted against "
        "the device address its X-Forwarded-For names, for rate limits and failed admin attempts",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        type=origin,
        metavar="ORIGIN",
        help="a web page's origin (scheme://host[:port]) whose visitors' browsers may report to the service "
        "(repeat for several); requests from every other page are refused 403 (default: none)",
    )
    serve.add_argument(
        "--public-url",
        type=public_url,
        metavar="URL",
        help="the service's own address as browsers reach it (scheme://host[:port]): requests its status page "
        "makes are its own; without it, every request that names a page's origin must come from an --allow-origin",
    )
    serve.add_argument(
        "--db-timeout",
        type=positive_number,
        default=DEFAULT_TIMEOUT,
        help="seconds a request may wait for the database, end to end (its turn to be written, a pooled "
        "connection, a lock, a frozen link), before it is answered 503 and /healthz says so; PostgreSQL's "
        f"connects and queries too (default {DEFAULT_TIMEOUT:g})",
    )
    serve.add_argument(
        "--db-pool",
        type=_pool_size,
        default=DEFAULT_POOL,
        help=f"PostgreSQL: connections each process opens at start, {POSTGRES_WRITE_LANES} of them held by the "
        f"writer's lanes, the rest for reads (default {DEFAULT_POOL})",
    )
    serve.add_argument(
        "--loop",
        choices=["auto", "uvloop", "asyncio"],
        default="auto",
        help="event loop: uvloop (a single report costs about a sixth less CPU) or Python's own; "
        "auto takes uvloop where it is installed (default auto)",
    )

    copy = sub.add_parser(
        "copy",
        help="copy a SQLite database into PostgreSQL",
        description="Copy collections, reports and settings from a SQLite file into a PostgreSQL database "
        "(created or migrated first); statistics are recomputed from the copied reports. Stop the service "
        "on the file first. Settings (the admin token, the enrollment key, the sealing keys) go to a target "
        "that has none; where the target has its own and they differ, the copy is refused until "
        "--keep-target-settings or --take-source-settings says whose to keep.",
    )
    copy.add_argument("--from", dest="source", required=True, help="the SQLite file")
    copy.add_argument("--to", dest="target", required=True, help="postgresql://USER@HOST:PORT/DB")
    whose = copy.add_mutually_exclusive_group()
    whose.add_argument(
        "--keep-target-settings", dest="settings", action="store_const", const="target",
        help="where the target already has settings of its own (a service started on it): keep its admin token, "
        "enrollment key and sealing keys (refused if a copied collection needs the file's)",
    )  # fmt: skip
    whose.add_argument(
        "--take-source-settings", dest="settings", action="store_const", const="source",
        help="replace the target's settings with the file's (its admin token among them)",
    )  # fmt: skip
    add_operator_parsers(sub, read_admin_token)
    add_privacy_parser(sub)

    draft = sub.add_parser(
        "spec",
        help="draft a collection spec from a public sample (CSV)",
        description="Draft the collection spec for data like a public sample: categories and class labels from "
        "the sample, declared ranges for numeric columns. Prints the spec (or writes --out) and what the sample "
        "could not decide.",
        allow_abbrev=False,
    )
    draft.add_argument("--csv", required=True, help="the sample")
    draft.add_argument("--label", required=True, help="the class column")
    draft.add_argument("--sep", help="field separator (default: sniffed)")
    draft.add_argument("--no-header", action="store_true", help="the first row is data: columns are 0, 1, ...")
    draft.add_argument("--drop", default="", metavar="COL,...", help="columns to leave out")
    draft.add_argument("--numeric", metavar="COL,...", help="continuous columns, besides those detected")
    draft.add_argument("--categorical", default="", metavar="COL,...", help="columns never taken as numeric")
    draft.add_argument(
        "--range", action="append", default=[], metavar="COL=LO:HI",
        help="declared range (repeat, or several separated by commas; COL may be a pattern, 'x*=0:1')",
    )
    draft.add_argument(
        "--ranges", action="append", default=[], metavar="FILE",
        help="a file of declared ranges, one COL=LO:HI (or pattern) per line, # for comments",
    )
    draft.add_argument(
        "--protocol", type=folded(PROTOCOL_NAMES), choices=list(PROTOCOL_NAMES), default="auto",
        help="frequency oracle, any case (default auto)",
    )
    draft.add_argument("--eps", type=number(*EPSILON_RANGE), help="epsilon per person (default 1)")
    draft.add_argument(
        "--central-eps",
        type=number(1e-6, EPSILON_RANGE[1]),
        metavar="E",
        help="draft a shuffled collection: the largest epsilon per person whose reports, shuffled in batches of at "
        "least --min-batch (default --people), stay within E against the aggregator alone (needs --people)",
    )
    draft.add_argument(
        "--min-batch", type=number(2, whole=True), metavar="K",
        help="with --central-eps: the fewest people's reports a shuffler releases at once (default --people)",
    )  # fmt: skip
    draft.add_argument(
        "--dummies", type=number(0, 10**9, whole=True), metavar="M",
        help="with --central-eps: dummy reports the shuffler adds to every batch (default: the default share of K)",
    )  # fmt: skip
    draft.add_argument(
        "--flooded-eps", type=number(1e-6, EPSILON_RANGE[1]), metavar="E",
        help="with --central-eps: also meet E against an aggregator that sends the shuffler every other report of a "
        "person's batch (the person's report among the dummies alone)",
    )  # fmt: skip
    draft.add_argument("--delta", type=number(1e-300, 0.5), metavar="D", help="with --central-eps: delta, below 1/K (default 1/(10 K))")
    draft.add_argument(
        "--model",
        choices=["discrete", "gaussian"],
        default="discrete",
        help="discrete (default, and recommended: it beat Gaussian NB on 26 of 32 data set and epsilon cells, "
        "research/results/continuous_models.md): numeric columns binned, a categorical Naive Bayes; gaussian: numeric columns "
        "as they are, a Gaussian Naive Bayes over the declared ranges",
    )
    draft.add_argument("--bins", type=number(2, whole=True), default=4, help="bins per numeric column, discrete model (default 4)")
    draft.add_argument(
        "--approach",
        type=int,
        choices=[1, 2, 3],
        default=3,
        help="gaussian model: 1 every coordinate, its noise scaled by their number; 2 the one-bit mechanism; "
        "3 one input per person (default). On small collections 1 and 2 can score below the constant "
        "classifier (documentation, Continuous features)",
    )
    draft.add_argument(
        "--class-share",
        type=share,
        metavar="SHARE",
        help="share of people who report the class input (default: as every other input); more of them "
        "estimate uneven classes better, at the features' expense",
    )
    draft.add_argument(
        "--people",
        type=positive_int,
        metavar="N",
        help="how many people you expect to report: the notes then say how surely their reports will name the "
        "most common class, and which --class-share would make it surer",
    )
    draft.add_argument("--out", help="file to write the spec to (default: standard output)")
    return parser


def refuse_unwritable(path: str) -> None:
    """Raise :class:`UsageError` unless a file can be written at ``path`` (checked before any work,
    nothing created): its folder exists and it is not itself a folder."""
    target = Path(path)
    if target.is_dir():
        reason = "a folder"
    elif not target.parent.is_dir():
        reason = f"no folder {target.parent}"
    elif not os.access(target if target.exists() else target.parent, os.W_OK):
        reason = "not writable"
    else:
        return
    raise UsageError(f"--out {path}: cannot write there ({reason})")


def run_spec_draft(args) -> str:
    """``python -m aggregator spec``: the drafted spec's JSON (or where it was written)."""
    from .csvdata import CSVOptions, parse_ranges, read_csv
    from .specdraft import draft_table_spec, spec_json

    split = lambda text: tuple(c.strip() for c in text.split(",") if c.strip())  # noqa: E731
    options = CSVOptions(
        label=args.label,
        sep=args.sep,
        header=not args.no_header,
        drop=split(args.drop),
        numeric=split(args.numeric) if args.numeric else None,
        categorical=split(args.categorical),
        ranges=parse_ranges(args.range, args.ranges),
    )
    if args.out:
        refuse_unwritable(args.out)
    central = flooded = None
    if args.central_eps is not None:
        if args.eps is not None:
            raise UsageError("--eps and --central-eps: give one (with --central-eps the epsilon per person follows)")
        if args.people is None:
            raise UsageError("--central-eps needs --people N: how many reports are shuffled together decides the epsilon")
    elif any(v is not None for v in (args.min_batch, args.delta, args.dummies, args.flooded_eps)):
        raise UsageError("--min-batch, --delta, --dummies and --flooded-eps go with --central-eps (a shuffled collection)")
    table, notes = read_csv(args.csv, options)
    spec, more = draft_table_spec(
        table, args.protocol, 1.0 if args.eps is None else args.eps, args.model, args.bins, args.approach,
        class_share=args.class_share, people=args.people,
    )  # fmt: skip
    if args.central_eps is not None:
        from dataclasses import replace

        from protocols.shuffling import default_delta, default_dummies, guarantees, local_epsilon_for

        batch = args.min_batch or args.people
        delta = args.delta if args.delta is not None else default_delta(batch)
        if delta * batch >= 1:
            raise UsageError(f"--delta {delta:g} must lie below 1/K = 1/{batch}: at 1/K one person's record of every batch could be published outright")
        dummies = args.dummies if args.dummies is not None else default_dummies(batch)
        local = local_epsilon_for(args.central_eps, batch, dummies, delta, args.flooded_eps, ceiling=EPSILON_RANGE[1])
        spec = replace(spec, epsilon=local, shuffle={"min_batch": batch, "delta": delta, "dummies": dummies})
        found = guarantees(local, batch, dummies, delta)
        central, flooded = found["people"], found["flooded"]
        more.append(
            f"shuffled in batches of at least {batch} people's reports and {dummies} dummies: each person reports at "
            f"epsilon {local:.4g}, which is ({central:.4g}, {delta:.3g})-DP against the aggregator alone when the batch's "
            f"others are people, and ({flooded:.4g}, {delta:.3g})-DP whatever the aggregator sends the shuffler; create "
            "the collection with a shuffler (create --shuffler URL) before devices can report"
        )
    for note in notes + more:
        print(f"note: {note}", file=sys.stderr)
    print(spec.privacy_statement(*((central, flooded) if central is not None else ())), file=sys.stderr)
    if args.out:
        try:
            with open(args.out, "w") as f:
                f.write(spec_json(spec))
        except OSError as exc:
            raise UsageError(f"--out {args.out}: cannot write there ({exc.strerror or exc})") from None
        return f"wrote the spec to {args.out}"
    return spec_json(spec).rstrip()


def read_admin_token(args) -> str | None:
    """The admin token from ``--admin-token-file`` (one line; the file readable by its owner
    only, as ssh wants of a key) or ``$LDPNB_ADMIN_TOKEN``; None if neither."""
    if args.admin_token_file:
        try:
            return secret_line(args.admin_token_file, "--admin-token-file")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return os.environ.get("LDPNB_ADMIN_TOKEN")


def slot_prefix(text: str) -> tuple[int, int]:
    """A ``--slot-prefix`` value: ``V4`` or ``V4,V6`` prefix lengths within their ranges."""
    from participant.serving import DEFAULT_SLOT_PREFIX, SLOT_PREFIX_RANGES

    parts = [p.strip().lstrip("/") for p in text.split(",")]
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected V4 or V4,V6 prefix lengths (such as 24,64), got {text!r}")
    bits = (int(parts[0]), int(parts[1]) if len(parts) == 2 else DEFAULT_SLOT_PREFIX[1])
    for value, (low, high), family in zip(bits, SLOT_PREFIX_RANGES, ("IPv4", "IPv6")):
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"an {family} prefix must lie in /{low} to /{high}, got /{value}")
    return bits


def public_url(text: str) -> str:
    """A ``--public-url`` value: the origin (``scheme://host[:port]``, lower-cased) of the URL given."""
    from urllib.parse import urlsplit

    parts = urlsplit(text.strip())
    return origin(f"{parts.scheme}://{parts.netloc}")


def origin(text: str) -> str:
    """An ``--allow-origin`` value: ``scheme://host[:port]``, lower-cased."""
    from ..service.origins import check_origin

    try:
        return check_origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def config_from(args):
    """The service's :class:`~aggregator.service.keys.Config` from the serve options."""
    from participant.addresses import parse_networks
    from ..service.keys import Config
    from ..service.opening import default_processes

    return Config(
        max_body_bytes=args.max_body,
        max_batch=args.max_batch,
        rate_limit=args.rate_limit,
        max_state=args.max_state,
        metrics_per_collection=args.metrics_per_collection,
        keepalive_timeout=args.keepalive_timeout,
        max_connections=args.max_connections,
        body_timeout=args.body_timeout,
        max_connections_per_address=args.max_connections_per_address,
        slot_prefix=args.slot_prefix,
        trusted_proxies=parse_networks(args.trusted_proxy),
        db_timeout=args.db_timeout,
        allowed_origins=tuple(args.allow_origin),
        public_origin=args.public_url or "",
        open_processes=args.open_processes or default_processes(args.workers),
    )


def store_options(args) -> dict:
    from ..store import is_postgres_url

    return {"pool_size": args.db_pool, "timeout": args.db_timeout} if is_postgres_url(args.db) else {"timeout": args.db_timeout}


async def prepare(args) -> None:
    """Open the database once (schema, admin token, keys) before any worker starts."""
    from ..service.app import open_store

    store, shown = await open_store(args.db, read_admin_token(args), args.rotate_admin_token, **store_options(args))
    await store.close()
    if shown:
        print(f"admin token (shown once; only its hash is stored): {shown}", flush=True)


async def serve_worker(args, sock: socket.socket | None, announce: bool, ready_fd: int | None = None) -> None:
    from ..service.app import create_app, open_store, start_site
    from ..service.garbage import tune_for_serving

    store, _ = await open_store(args.db, None, **store_options(args))
    runner, url = await start_site(await create_app(store, config_from(args)), args.host, args.port, sock)
    tune_for_serving()
    if ready_fd is not None:
        os.write(ready_fd, b".")
        os.close(ready_fd)
    if announce:
        workers = f", {args.workers} workers" if args.workers > 1 else ""
        print(f"ldpnb aggregator listening on {url} (database {store.location}{workers}); Ctrl-C stops it", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await store.close()
    # Stopped cleanly: every connection closed, every write committed, the store closed. Models
    # still building on worker threads (their clients gone) would hold the exit for as long as
    # they take, since Python joins those threads at exit; nothing of theirs is kept.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def run_loop(coroutine, loop: str = "auto"):
    """Run ``coroutine`` to its end on uvloop or asyncio's loop (``loop``: "uvloop", "asyncio", or
    "auto": uvloop when it can be imported); returns its result."""
    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                coroutine.close()
                raise UsageError("--loop uvloop needs the uvloop package: pip install uvloop") from None
        else:
            return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def _reuse_port_socket(host: str, port: int, listen: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def end_with_parent() -> None:
    """Ask the kernel (Linux) to SIGTERM this worker when the process that forked it dies: a
    killed master leaves no worker serving on its own."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def forward_all(children: list[int], signum: int) -> None:
    for child in children:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass


def reserve_port(args) -> socket.socket:
    """The service's listening socket (for several workers, a socket that holds the port for
    them), bound before anything else starts: a busy port is one line, with no database created
    and no admin token shown."""
    try:
        if args.workers > 1:
            return _reuse_port_socket(args.host, args.port, listen=False)  # reserves the port, takes no connection
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((args.host, args.port))
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as exc:
        hint = "; another program listens there: choose another --port" if exc.errno == errno.EADDRINUSE else ""
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}{hint}") from None


def serve_many(args, holder: socket.socket) -> int:
    """Fork ``args.workers`` processes, each listening on the same port with SO_REUSEPORT, so the
    kernel spreads connections evenly over them (one shared listening socket lets whichever
    process wakes first take every connection); ``holder`` holds the port meanwhile."""
    host, port = holder.getsockname()[:2]
    ready_read, ready_write = os.pipe()
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            end_with_parent()
            try:
                sock = _reuse_port_socket(host, port, listen=True)
                run_loop(serve_worker(args, sock, announce=False, ready_fd=ready_write), args.loop)
                os._exit(0)
            except BaseException:
                logging.exception("worker failed")
                os._exit(1)
        children.append(pid)
    os.close(ready_write)
    started = 0
    while started < args.workers:  # every worker listens before the service says it does
        chunk = os.read(ready_read, args.workers)
        if not chunk:
            forward_all(children, signal.SIGTERM)
            raise UsageError("a worker failed to start; see the log above")
        started += len(chunk)
    os.close(ready_read)
    print(
        f"ldpnb aggregator listening on http://{host}:{port} (database {args.db_location}, {args.workers} workers); "
        "Ctrl-C stops it",
        flush=True,
    )

    def forward(signum, _frame):
        forward_all(children, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status = 0
    for child in children:
        _, code = os.waitpid(child, 0)
        status = status or os.waitstatus_to_exitcode(code)
    return 0 if status in (0, -signal.SIGTERM, -signal.SIGINT) else 1


def database_problem(exc: BaseException) -> str:
    """What a failed start says about the database, in words: whether anything listens there."""
    if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
        return f"nothing is listening there (is the server running?) ({type(exc).__name__}: {exc})"
    if isinstance(exc, TimeoutError):
        return "no answer within the --db-timeout (is the address right, the server up?)"
    return " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever the driver wrote


def database_address(args) -> str:
    """The database ``serve`` opens: --db, else the first line of --db-file, else $LDPNB_DB, else
    ldpnb.sqlite3; raises :class:`UsageError` for both options or an unreadable file."""
    if args.db and args.db_file:
        raise UsageError("--db and --db-file name the database twice: give one")
    if args.db_file:
        try:
            lines = Path(args.db_file).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--db-file {args.db_file}: cannot read it ({exc})") from None
        if not lines or not lines[0].strip():
            raise UsageError(f"--db-file {args.db_file}: its first line should be the database address")
        return lines[0].strip()
    return args.db or os.environ.get("LDPNB_DB") or "ldpnb.sqlite3"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except Exception as exc:
        parser.exit(2, f"{parser.prog}: error: {refusal(args, exc)}\n")


def run(args) -> int:
    """Carries out the parsed command ``args``; returns its exit status."""
    if args.command == "spec":
        print(run_spec_draft(args), flush=True)
        return 0
    if args.command == "privacy":
        print(run_privacy(args), flush=True)
        return 0
    if args.command in OPERATOR_COMMANDS:
        try:
            print(run_operator(args), flush=True)
        except KeyboardInterrupt:  # Ctrl-C while waiting on the service (status --wait): stop, no traceback
            print(file=sys.stderr)
            return 130
        return 0
    if args.command == "copy":
        from .copy import copy_database

        summary = asyncio.run(copy_database(args.source, args.target, args.settings))
        print(summary, flush=True)
        return 0
    from ..store import is_postgres_url
    from ..store.postgres import redacted

    args.db = database_address(args)
    if args.workers > 1 and not is_postgres_url(args.db):
        raise UsageError("--workers needs a PostgreSQL database: one process serves a SQLite file")
    config_from(args)  # refuses a bad option before anything starts
    sock = reserve_port(args)  # a busy port: nothing is created, no token shown
    asyncio.run(prepare(args))
    if args.workers == 1:
        run_loop(serve_worker(args, sock, announce=True), args.loop)
        return 0
    args.db_location = redacted(args.db)
    return serve_many(args, sock)


def refusal(args, exc: Exception) -> str:
    """The one line (without the program's name) that tells what made the command ``args`` fail
    with ``exc``; re-raises ``exc`` when it is no refusal but a fault."""
    # The drivers' exception classes are imported once a command has failed, so that the
    # operator's commands run without loading asyncpg or aiohttp's server.
    import asyncpg

    from ..service.auth import TokenError
    from ..store import StoreLocked, StoreUnavailable
    from ..store.postgres import redacted
    from .copy import CopyError

    if isinstance(exc, (UsageError, TokenError, StoreLocked, CopyError, OperatorError, ValueError)):
        return str(exc)
    if isinstance(exc, StoreUnavailable):
        return f"the database cannot be used: {exc}"
    if isinstance(exc, (OSError, TimeoutError, sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError)):
        where = redacted(args.db) if getattr(args, "db", None) else "the database"
        return f"cannot open the database {where}: {database_problem(exc)}"
    raise exc

if __name__ == "__main__":
    sys.exit(main())
