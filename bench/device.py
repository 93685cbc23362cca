"""What the device spends in time and memory: one report, a unit of a draw's work, and a spec it refuses.

    python bench/device.py [--reports 2000] [--ledger-only]

1. For each spec in ``sim/specs`` (its protocol as shipped, ``auto`` for the discrete ones), builds
   one participant and times ``--reports`` reports of records drawn from the data set, after a
   warm-up: the median and the 99th percentile per report, with the secure samplers (the OS
   CSPRNG, exact coins). The client paces the send separately (``participant.client.DEFAULT_PACE``).
2. The units of :mod:`participant.limits`' draw-time estimate: one exact discrete Laplace sample
   (a SHE report of 2,000 entries, per entry) and one 64-bit coin word (an OUE report of 10^6
   entries, per entry), beside the constants the device estimates with.
3. Specs a hostile service may publish, over the default :class:`~participant.Limits`: the time
   and peak traced memory of reading the answer and refusing it (``Published.from_answer``).
4. The same units for the JavaScript device in Node (``participant-js``, built with ``npm ci &&
   npm run build``), beside the constants it estimates with (Python's).
5. One submit's ledger work (claim a fresh report, record it, mark it sent) against the ledger
   one and three years of daily collections leave (a new question a day), each answered with the
   largest report the default limits let that device draw (a SHE report: about 78 KiB in Python,
   39 KiB in Node), direct and shuffled, in Python and in Node; and in Chromium (8 KiB, the most
   the page's draw limit admits) against a year's entries; and in all three against the largest
   ledger the default limits allow at one origin (:func:`largest_ledger`: 295 collections in the
   last 30 days and as many on the day before, the memo's 100 answers of 8 KiB, a sum a day and
   the markers of a year of entries that left at the cap; the bound holds per origin the app
   reports to).
   The median of 5 (a fresh ledger object each: a device starting up), and the ledger's size:
   its file and its report files.

Writes ``bench/results/device.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np

from participant import CollectionSpec, LimitExceeded, Participant, SecureGenerator
from participant.client import Published
from participant.ledger import Asked, Ledger, Limits, report_name
from participant.limits import SECONDS_PER_COIN, SECONDS_PER_INDEX, SECONDS_PER_NOISE
from protocols.histogram import SummationHistogramEncoding
from protocols.unary import OptimisedUnaryEncoding
from sim.datasets import load_dataset

SPECS = Path(__file__).resolve().parents[1] / "sim" / "specs"
RESULTS = Path(__file__).with_name("results") / "device.md"


def records(name: str, spec: CollectionSpec, count: int) -> list[dict]:
    data = load_dataset(name)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(data.y), count)
    names = [f.name for f in (spec.continuous.inputs if spec.continuous else spec.features)]
    return [{**dict(zip(names, data.X[r])), spec.label: data.y[r]} for r in rows]


def per_entry(mechanism, repeats: int = 5) -> float:
    """Seconds per entry of one report of ``mechanism`` drawn with the secure samplers (the median of ``repeats``)."""
    rng = SecureGenerator()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mechanism.perturb(np.array([0]), rng)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / mechanism.domain_size


def hostile_specs() -> dict[str, dict]:
    """Specs over the default limits, as a service publishes them (raw mappings)."""
    many = [f"v{i}" for i in range(10_000)]
    return {
        "OUE, 10^4 classes x 10^4 categories (10^8 entries)": {
            "features": [{"name": "f", "categories": many}], "classes": many, "protocol": "OUE", "epsilon": 1.0},
        "auto, the same": {"features": [{"name": "f", "categories": many}], "classes": many, "protocol": "auto",
                           "epsilon": 1.0},
        "OUE, 1,000 classes x 1,000 categories (10^6 in one input)": {
            "features": [{"name": "f", "categories": many[:1000]}], "classes": many[:1000], "protocol": "OUE",
            "epsilon": 1.0},
        "SHE, 4 classes x 10,000 categories (a draw estimated at 4 s)": {
            "features": [{"name": "f", "categories": many}],
            "classes": ["a", "b", "c", "d"], "protocol": "SHE", "epsilon": 1.0},
        "2,000 continuous outputs of 10^4 bins": {
            "continuous": {"inputs": [{"name": f"x{i}", "low": 0, "high": 1} for i in range(2000)], "bins": 10_000},
            "classes": ["a", "b"], "protocol": "OUE", "epsilon": 1.0},
    }  # fmt: skip


def refusal(spec: dict) -> tuple[float, float, str]:
    """``(seconds, peak traced bytes, message)`` of reading a service's answer with ``spec`` and
    refusing it: the time untraced (the median of five), the memory in a traced sixth run."""
    body = msgpack.packb({"id": "c1", "uid": "u" * 32, "spec": spec, "fingerprint": "f" * 64})

    def refuse() -> str:
        try:
            Published.from_answer(msgpack.unpackb(body))
        except LimitExceeded as refused:
            return str(refused)
        raise AssertionError("a spec over the limits was accepted")

    times = []
    for _ in range(5):
        start = time.perf_counter()
        message = refuse()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    refuse()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return float(np.median(times)), peak, message


JS = Path(__file__).resolve().parents[1] / "participant-js"

JS_UNITS = """
import { makeOracle, SecureRandom } from "./dist/src/index.js";
import { SLOW_DEVICE } from "./dist/src/calibration.js";
const source = new SecureRandom();
function perEntry(oracle, d) {
  oracle.perturb(0, source);
  const times = [];
  for (let i = 0; i < 5; i++) { const t = performance.now(); oracle.perturb(0, source); times.push(performance.now() - t); }
  times.sort((a, b) => a - b);
  return times[2] / 1000 / d;
}
console.log(JSON.stringify({ noise: perEntry(makeOracle("SHE", 1, 2000), 2000),
  coins: perEntry(makeOracle("OUE", 1, 1000000), 1000000), estimate: SLOW_DEVICE }));
"""

JS_LEDGER = """
import { Limits } from "./dist/src/index.js";
import { fileLedger } from "./dist/src/node.js";
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
const [file, shuffled, ...paths] = process.argv.slice(1);
const report = new Uint8Array(readFileSync(file));
// randomBytes: getRandomValues draws at most 64 KiB, less than a sealed SHE report of 9,999 floats.
const seal = shuffled === "1" ? async (body) => new Uint8Array(randomBytes(body.length + 100)) : undefined;
const timings = [];
for (const [i, path] of paths.entries()) {
  const ledger = fileLedger(path);
  const asked = { origin: "http://x.example", collection: `today${i}`, uid: "t".repeat(32), fingerprint: "f".repeat(64),
                  epsilon: 0.25, question: seal ? "" : "t".repeat(64), group: null };  // as the client asks: a shuffled answer is never memoised
  const start = performance.now();
  const claim = await ledger.claim(asked, new Limits(), () => report, (old) => old, seal);
  await ledger.markSent(claim.key);
  timings.push((performance.now() - start) / 1000);
}
console.log(JSON.stringify(timings));
"""


def node(script: str, *args: str) -> object:
    """What a Node script run in participant-js/ prints (JSON)."""
    result = subprocess.run(["node", "--input-type=module", "-e", script, *args], cwd=JS, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"node failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout)


# A packed report's bytes beyond its payload (id, spec digest, input, the map's keys), and what
# sealing adds (HPKE's encapsulated key and tag, the envelope): both rounded up.
REPORT_OVERHEAD = 80
SEAL_OVERHEAD = 100
# The most entries the default limits let a ledger hold at one origin (participant/ledger.py's
# opening note; the bound holds per origin the app reports to): the entries of the last 30 days
# and the day before them (fewer than max_collections within the window, room for the five
# submits measured; as many again on that day), and the memo's max_memo_per_origin answers,
# besides a sum a day and a year of markers.
LARGEST_RECENT = Limits().max_collections - 5  # room for the five submits measured (Chromium: on one ledger)
LARGEST_MEMO = Limits().max_memo_per_origin
# Entries that leave the ledger a day at the cap (max_collections every budget window), each
# leaving two markers for a year.
LARGEST_LEFT_A_DAY = -(-Limits().max_collections // int(Limits().budget.per_days))


def largest_she(seconds_per_noise: float) -> int:
    """The entries of the largest report the default limits let a device draw, estimating a noise
    sample at ``seconds_per_noise``: a SHE report of as many entries as fit the draw-time limit
    (8 bytes an entry: more than an OUE report's 8 KiB at the largest domain)."""
    return int((Limits().max_draw_seconds - SECONDS_PER_INDEX) / seconds_per_noise)


def she_reports(entries: int) -> Callable[[], bytes]:
    """Fresh reports of a SHE input of ``entries`` at ε 0.25, as a device packs them (its floats,
    and the map around them): one drawn, then its values in a fresh order each time (a draw
    takes 0.2 s; the order changes nothing of what a ledger stores of it but the bytes)."""
    values = SummationHistogramEncoding(0.25, entries).perturb(np.array([0]), SecureGenerator())[0]
    rng = np.random.default_rng()
    return lambda: rng.permutation(values).astype("<f8").tobytes() + os.urandom(REPORT_OVERHEAD)


def daily_collections(path: Path, days: int, report: Callable[[], bytes], shuffled: bool) -> None:
    """The ledger ``days`` of daily collections leave: one new question a day at ε 0.0625 (a year
    of them within the default yearly cap of 24), each
    answered with a fresh ``report()`` (sealed too when ``shuffled``), written by the device day
    by day, so that entries leave as they would."""
    ledger, limits = Ledger(path), Limits()
    seal = (lambda body: os.urandom(len(body) + SEAL_OVERHEAD)) if shuffled else None
    start, real = time.time() - days * 86_400, time.time
    try:
        for day in range(days):
            time.time = lambda day=day: start + day * 86_400
            # As the client asks: a shuffled collection's answer is drawn afresh, never memoised.
            asked = Asked("http://x.example", f"day{day}", f"{day:032d}", "f" * 64, 0.0625, "" if shuffled else f"{day:064d}")
            claim = ledger.claim(asked, limits, report, lambda old: old, seal)
            ledger.mark_sent(claim.key)
    finally:
        time.time = real


def largest_ledger(path: Path, report_bytes: int) -> int:
    """The largest ledger the default limits allow at one origin, as the device writes it (version
    6; writing it day by day through the device would take hours): ``LARGEST_RECENT`` acknowledged
    entries in the last 30 days and as many on the day before (their answers given up: no report),
    the memo's ``LARGEST_MEMO`` answers spread over the year before, each a report file of
    ``report_bytes`` random bytes, and for each day of the rest of the year a sum and the markers
    of ``LARGEST_LEFT_A_DAY`` entries that left (two each). Returns its entries."""
    reports = path.with_name(path.name + ".reports")
    reports.mkdir(mode=0o700)
    now, entries, day = time.time(), {}, 86_400

    def add(origin: str, collection: str, at: float, question: str, kept: bool) -> None:
        key = f"{origin} {collection}"
        entry = {"origin": origin, "collection": collection, "uid": collection.ljust(32, "u"), "fingerprint": "f" * 64,
                 "question": question, "group": None, "epsilon": 0.001, "report": "", "sent": True, "memo_of": None,
                 "reserved_at": at, "sent_at": at}  # fmt: skip
        if kept:
            body = os.urandom(report_bytes)
            entry["report"] = report_name("report", key, entry, hashlib.sha256(body).digest())
            (reports / entry["report"]).write_bytes(zlib.compress(body))
        entries[key] = entry

    for i in range(LARGEST_RECENT):
        add("http://x.example", f"recent{i}", now - 30 * day * (i + 1) / (LARGEST_RECENT + 1), f"r{i}".ljust(64, "0"), False)
        add("http://x.example", f"day31-{i}", now - 30 * day - day * (i + 1) / (LARGEST_RECENT + 2), f"s{i}".ljust(64, "0"), False)
    for i in range(LARGEST_MEMO):
        at = now - 31 * day - 330 * day * (i + 1) / (LARGEST_MEMO + 1)
        add("http://x.example", f"memo{i}", at, f"m{i}".ljust(64, "0"), True)
    today = int(now // day)
    spent = {str(d): "1/1024" for d in range(today - 366, today - 31)}
    reported = {d: os.urandom(16 * 2 * LARGEST_LEFT_A_DAY).hex() for d in spent}
    path.write_text(json.dumps({"version": 6, "entries": entries, "spent": spent, "reported": reported}))
    return len(entries)


def copy_ledger(source: Path, target: Path) -> None:
    shutil.copy(source, target)
    reports = source.with_name(source.name + ".reports")
    if reports.exists():
        shutil.copytree(reports, target.with_name(target.name + ".reports"))


def footprint(path: Path) -> tuple[int, int, int]:
    """The ledger's entries, its file's bytes and its reports' bytes."""
    reports = path.with_name(path.name + ".reports")
    stored = sum(f.stat().st_size for f in reports.iterdir()) if reports.exists() else 0
    return len(json.loads(path.read_text())["entries"]), path.stat().st_size, stored


def python_submits(year: Path, scratch: Path, report: Callable[[], bytes], shuffled: bool) -> list[float]:
    """Seconds of one submit's ledger work (claim a fresh report, record it, mark it sent) on five copies of ``year``."""
    seal = (lambda body: os.urandom(len(body) + SEAL_OVERHEAD)) if shuffled else None
    timings = []
    for i in range(5):
        copy_ledger(year, scratch / f"py{i}.json")
        ledger = Ledger(scratch / f"py{i}.json")
        asked = Asked("http://x.example", f"today{i}", "t" * 32, "f" * 64, 0.25, "" if shuffled else "t" * 64)
        started = time.perf_counter()
        ledger.mark_sent(ledger.claim(asked, Limits(), report, lambda old: old, seal).key)
        timings.append(time.perf_counter() - started)
    return timings


def node_submits(year: Path, scratch: Path, report: Callable[[], bytes], shuffled: bool) -> list[float]:
    """As :func:`python_submits`, in Node, the fresh report one of ``report()``'s."""
    copies = []
    for i in range(5):
        copies.append(scratch / f"js{i}.json")
        copy_ledger(year, copies[-1])
    (scratch / "report.bin").write_bytes(report())
    return node(JS_LEDGER, str(scratch / "report.bin"), "1" if shuffled else "0", *map(str, copies))


# The largest ledger the default limits allow (as largest_ledger writes it), written into the
# page's IndexedDB as the library keeps it (database version 5: reports deflated, bound to their
# entries; the sums by day in the store `spent`, the markers in the store `reported`); or, with
# recent = 0 and memo = 365, a year of a new question a day. Then five submits' ledger work, and
# the longest task on the page's thread.
BROWSER_LEDGER = """async ([origin, recent, memo, left, bytes]) => {
    const now = Date.now() / 1000, day = 86400;
    const deflate = async b => new Uint8Array(await new Response(new Blob([b]).stream().pipeThrough(new CompressionStream("deflate"))).arrayBuffer());
    const records = [];
    const add = async (origin, collection, at, question, kept) => {
        const key = `${origin} ${collection}`;
        records.push([key, { origin, collection, uid: collection.padEnd(32, "u"), fingerprint: "f".repeat(64), question, group: null,
            epsilon: 0.001, report: kept ? "kept" : "", sent: true, memo_of: null, reserved_at: at, sent_at: at },
            { entry: key, question, group: null, report: kept ? await deflate(crypto.getRandomValues(new Uint8Array(bytes))) : "" }]);
    };
    for (let i = 0; i < recent; i++) {
        await add(origin, `recent${i}`, now - 30 * day * (i + 1) / (recent + 1), `r${i}`.padEnd(64, "0"), false);
        await add(origin, `day31-${i}`, now - 30 * day - day * (i + 1) / (recent + 2), `s${i}`.padEnd(64, "0"), false);
    }
    const span = recent ? 330 : 365, after = recent ? 31 : 0;
    for (let i = 0; i < memo; i++)
        await add(origin, `memo${i}`, now - after * day - span * day * (i + 1) / (memo + 1), `m${i}`.padEnd(64, "0"), true);
    const spent = {}, reported = {};
    const hex = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), b => b.toString(16).padStart(2, "0")).join("");
    if (recent)
        for (let d = Math.floor(now / day) - 366; d < Math.floor(now / day) - 31; d++) {
            spent[d] = "1/1024";
            reported[d] = Array.from({ length: 2 * left }, hex).join("");
        }
    let stored = 0;
    for (const [, , report] of records) stored += report.report.length;
    await new Promise((done, fail) => {
        const open = indexedDB.open("ldpnb", 5);
        const stores = ["ledger", "entries", "reports", "spent", "reported"];
        open.onupgradeneeded = () => stores.forEach(s => open.result.createObjectStore(s));
        open.onsuccess = () => {
            const tx = open.result.transaction(stores, "readwrite");
            for (const [key, entry, report] of records) { tx.objectStore("entries").put(entry, key); tx.objectStore("reports").put(report, key); }
            tx.objectStore("spent").put(spent, "spent");
            tx.objectStore("reported").put(reported, "reported");
            tx.oncomplete = () => { open.result.close(); done(); };
            tx.onerror = () => fail(tx.error);
        };
    });
    const { browserLedger, Limits } = await import("/dist/ldpnb.browser.js");
    let longest = 0;
    new PerformanceObserver(list => list.getEntries().forEach(e => { longest = Math.max(longest, e.duration); }))
        .observe({ type: "longtask" });
    const timings = [];
    for (let i = 0; i < 5; i++) {
        const ledger = browserLedger();
        const asked = { origin, collection: `today${i}`, uid: `${i}`.padEnd(32, "t"), fingerprint: "f".repeat(64),
                        epsilon: 0.25, question: `${i}`.padEnd(64, "t"), group: null };
        const started = performance.now();
        const claim = await ledger.claim(asked, new Limits(), () => crypto.getRandomValues(new Uint8Array(bytes)), old => old);
        await ledger.markSent(claim.key);
        timings.push((performance.now() - started) / 1000);
    }
    await new Promise(done => setTimeout(done, 200));  // the observer's last entries
    return { timings, longest, entries: records.length, stored };
}"""


def chromium_submits(recent: int, memo: int, report_bytes: int) -> dict:
    """Five submits' ledger work in Chromium (seconds each, the longest task on the page's main
    thread in ms, the entries and the reports' deflated bytes) against a ledger in IndexedDB of
    ``recent`` entries in the last 30 days and as many the day before, and ``memo`` answers of
    ``report_bytes`` each (see BROWSER_LEDGER)."""
    import asyncio
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from playwright.async_api import async_playwright

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(JS), **kwargs)

        def log_message(self, *args):
            pass

    Quiet.extensions_map = {**Quiet.extensions_map, ".js": "text/javascript"}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"

    async def measure() -> dict:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            try:
                page = await (await browser.new_context()).new_page()
                await page.goto(f"{origin}/README.md")
                return await page.evaluate(BROWSER_LEDGER, [origin, recent, memo, LARGEST_LEFT_A_DAY, report_bytes])
            finally:
                await browser.close()

    try:
        return asyncio.run(measure())
    finally:
        server.shutdown()


def ledger_section(units: dict) -> list[str]:
    """The table of section 5; ``units`` are the JavaScript device's (what it estimates a noise sample at)."""
    python_entries, node_entries = largest_she(SECONDS_PER_NOISE), largest_she(units["estimate"]["noise"])
    lines = [
        "",
        "## One submit's ledger work against the ledger years of daily collections leave",
        "",
        (
            "A new question a day, each answered with the largest report the default limits let that device draw, "
            "written by the device day by day; then one submit's ledger work (claim a fresh report, record it, mark "
            "it sent), five times on copies. Goal (issues 70 and 79): at most 50 ms, and no task on a page's main "
            "thread over 50 ms, the ledger under a few MB, whatever a service asks."
        ),
        "",
        "| device | reports | ledger after | entries | ledger file | report files | median of 5 | fastest | slowest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for who, she, submits in (("Python", python_entries, python_submits), ("Node", node_entries, node_submits)):
            report = she_reports(she)
            for shuffled in (False, True):
                for years in (1, 3):
                    year = scratch / f"{who}-{shuffled}-{years}.json"
                    daily_collections(year, 365 * years, report, shuffled)
                    copies = scratch / f"{who}-{shuffled}-{years}"
                    copies.mkdir()
                    timings = submits(year, copies, report, shuffled)
                    entries, file_bytes, stored = footprint(year)
                    kind = f"{'shuffled' if shuffled else 'direct'}, SHE of {she:,} ({len(report()) / 1024:.0f} KiB)"
                    lines.append(
                        f"| {who} | {kind} | {years} year{'s' if years > 1 else ''} | {entries} | {file_bytes / 1e6:.2f} MB "
                        f"| {stored / 1e6:.1f} MB | {np.median(timings) * 1e3:.1f} ms | {min(timings) * 1e3:.1f} ms "
                        f"| {max(timings) * 1e3:.1f} ms |"
                    )
                    print(lines[-1], flush=True)
        oue = Limits().max_domain // 8 + REPORT_OVERHEAD
        largest = scratch / "largest.json"
        largest_ledger(largest, oue)
        for who, submits in (("Python", python_submits), ("Node", node_submits)):
            copies = scratch / f"{who}-largest"
            copies.mkdir()
            timings = submits(largest, copies, lambda: os.urandom(oue), False)
            entries, file_bytes, stored = footprint(largest)
            lines.append(
                f"| {who} | direct, {oue / 1024:.0f} KiB | the largest the limits allow | {entries} | {file_bytes / 1e6:.2f} MB "
                f"| {stored / 1e6:.1f} MB | {np.median(timings) * 1e3:.1f} ms | {min(timings) * 1e3:.1f} ms "
                f"| {max(timings) * 1e3:.1f} ms |"
            )
            print(lines[-1], flush=True)
    browser_bytes = Limits().max_domain // 8 + REPORT_OVERHEAD  # the page's draw limit admits no larger report
    for label, recent, memo in (("1 year", 0, 365), ("the largest the limits allow", LARGEST_RECENT, LARGEST_MEMO)):
        measured = chromium_submits(recent, memo, browser_bytes)
        t = measured["timings"]
        lines.append(
            f"| Chromium (IndexedDB; longest task {measured['longest']:.0f} ms) | direct, {browser_bytes / 1024:.0f} KiB "
            f"| {label} | {measured['entries']} | - | {measured['stored'] / 1e6:.1f} MB (deflated) | {np.median(t) * 1e3:.1f} ms "
            f"| {min(t) * 1e3:.1f} ms | {max(t) * 1e3:.1f} ms |"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=2000)
    parser.add_argument("--ledger-only", action="store_true",
                        help="measure section 5 alone, replacing it in the results file and keeping the rest")
    args = parser.parse_args()
    if args.ledger_only:
        kept = RESULTS.read_text().split("\n## One submit's ledger work")[0].rstrip("\n").split("\n")
        RESULTS.write_text("\n".join(kept + ledger_section(node(JS_UNITS))) + "\n")
        return
    lines = [
        f"# One report on the device (`python bench/device.py --reports {args.reports}`)",
        "",
        "| spec | protocol | inputs | median | 99th percentile |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(SPECS.glob("*.json")):
        spec = CollectionSpec.from_json(path.read_text())
        participant = Participant(spec)
        batch = records(path.stem, spec, args.reports)
        for record in batch[:100]:
            participant.report(record)
        times = np.empty(len(batch))
        for i, record in enumerate(batch):
            start = time.perf_counter()
            participant.report(record)
            times[i] = time.perf_counter() - start
        lines.append(
            f"| {path.stem} | {spec.protocol} | {spec.n_inputs} | {np.median(times) * 1e3:.3f} ms "
            f"| {np.percentile(times, 99) * 1e3:.3f} ms |"
        )
        print(lines[-1], flush=True)
    noise = per_entry(SummationHistogramEncoding(1.0, 2000))
    coin = per_entry(OptimisedUnaryEncoding(1.0, 1_000_000))
    lines += [
        "",
        "## The units of the draw-time estimate (participant/limits.py)",
        "",
        "| unit | measured here | the device estimates with |",
        "|---|---|---|",
        f"| one exact discrete Laplace sample (SHE, THE, Laplace mean) | {noise * 1e6:.1f} us | "
        f"{SECONDS_PER_NOISE * 1e6:.0f} us |",
        f"| one coin word (SUE, OUE) | {coin * 1e9:.0f} ns | {SECONDS_PER_COIN * 1e9:.0f} ns |",
        "",
        "## Specs over the default limits: reading the answer and refusing it",
        "",
        "| what the service publishes | time | peak traced memory | refused because |",
        "|---|---|---|---|",
    ]
    for name, spec in hostile_specs().items():
        seconds, peak, message = refusal(spec)
        reason = message.split("; this app accepts")[0].split(" asks ")[-1]
        lines.append(f"| {name} | {seconds * 1e3:.1f} ms | {peak / 1e6:.1f} MB | {reason} |")
        print(lines[-1], flush=True)
    units = node(JS_UNITS)
    lines += [
        "",
        "## The JavaScript device's units (Node, participant-js/src/calibration.ts)",
        "",
        "| unit | measured here | Python's | the device estimates with (Python's constants) |",
        "|---|---|---|---|",
        f"| one exact discrete Laplace sample | {units['noise'] * 1e6:.1f} us | {noise * 1e6:.1f} us | "
        f"{units['estimate']['noise'] * 1e6:.0f} us |",
        f"| one coin word | {units['coins'] * 1e9:.0f} ns | {coin * 1e9:.0f} ns | {units['estimate']['coins'] * 1e9:.0f} ns |",
    ]
    lines += ledger_section(units)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
