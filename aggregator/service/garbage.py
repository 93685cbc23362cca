"""The garbage collector's and the interpreter's settings for a serving process.

Under bench/ingest.py's load (20,500 single reports, 64 in flight) CPython's defaults ran 293
young passes, 27 middle ones and 3 over the whole heap, every module, the app and the store
included: 117 ms, 6 µs of the 80 µs of CPU a report cost, and each whole-heap pass held the event
loop for 23 ms. Almost nothing a request allocates is cyclic (reference counting frees it when the
request ends), so the collector finds next to nothing. Frozen and with a higher threshold, the same
load ran no pass at all (documentation, *Measured figures*).
"""

from __future__ import annotations

import gc
import sys

#: Net container allocations between young-generation passes (CPython's default: 700).
YOUNG_THRESHOLD = 10_000
#: Seconds a thread holds the GIL before another may take it (CPython's default: 0.005).
SWITCH_INTERVAL = 0.001


def tune_for_serving() -> None:
    """Move everything allocated so far (modules, the app, the store) out of the collector's
    sight, and run young-generation passes every :data:`YOUNG_THRESHOLD` allocations. Cycles are
    still collected, less often; the older generations keep their ratios. Threads hand the GIL
    over every :data:`SWITCH_INTERVAL` seconds."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    # A worker thread building a model or reading statistics holds the GIL for up to this long
    # before the event loop's thread may run: 1 ms instead of Python's 5.
    sys.setswitchinterval(SWITCH_INTERVAL)
