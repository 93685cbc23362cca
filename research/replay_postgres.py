"""The connect-4 replay over HTTP against two aggregator workers on PostgreSQL, beside the
in-process run with the same seed.

    python research/replay_postgres.py [--dataset connect-4] [--workers 2] [--clients 1000]

Starts PostgreSQL (the ``pgserver`` wheel's binaries, in a temporary directory) and
``python -m aggregator serve --workers N`` on it, then runs ``python -m sim ... --via http
--aggregator URL`` (every training row a participant client) and ``--via process``, and prints
both outputs: the accuracies must be identical.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' helpers: problems, ingest, estimators
from ingest import postgres_server, start

from sim.http_replay import connection_caps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="connect-4")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=1000)
    args = parser.parse_args()
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "LDPNB_ADMIN_TOKEN": token}
    sim = [sys.executable, "-m", "sim", "--dataset", args.dataset, "--protocol", "OUE", "--eps", "1", "--reps", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        server, fresh = postgres_server(tmp)
        try:
            aggregator, url = start(
                # Every participant client connects from 127.0.0.1: each worker may have to hold all of them.
                [sys.executable, "-m", "aggregator", "serve", "--db", fresh(), "--port", "0", "--workers", str(args.workers),
                 *connection_caps(args.clients)],
                env=env,
            )
            try:
                began = time.perf_counter()
                http = subprocess.run(
                    [*sim, "--via", "http", "--aggregator", url, "--clients", str(args.clients)],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                elapsed = time.perf_counter() - began
            finally:
                aggregator.terminate()
                aggregator.wait()
        finally:
            server.cleanup()
    if http.returncode != 0:
        sys.exit(f"the replay over HTTP failed: {http.stderr.strip().splitlines()[-1] if http.stderr.strip() else http.returncode}")
    local = subprocess.run([*sim, "--via", "process"], capture_output=True, text=True)
    print(f"--via http, {args.workers} workers on PostgreSQL, {elapsed:.1f} s in all:\n{http.stdout}")
    print(f"--via process:\n{local.stdout}")


if __name__ == "__main__":
    main()
