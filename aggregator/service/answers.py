"""Large answers (estimates and models of big collections): encoded once per release state, in
slices, so no request holds the event loop.

A million floats take ``json.dumps`` two seconds in one call that never lets go of the GIL: while
it runs on a worker thread, the event loop thread waits for the GIL, and every request waits with
it. Here long arrays and lists are encoded a slice at a time, and the worker thread lets the GIL
go between slices. An answer depends only on the collection's statistics (their report count
says which state they are in), the route, the estimator and the format, so it is built once and
served from :class:`AnswerCache` to every request for that state, concurrent ones included.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

import msgpack
import numpy as np

SLICE = 4096  # values encoded per call: about 10 ms of JSON on one core
POLL_SECONDS = 0.5  # how often a request waiting for an answer checks that its client is still there
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # compact: a wide model's answer is tens of MB


def _slices(values) -> list:
    return [values[i : i + SLICE] for i in range(0, len(values), SLICE)]


def _long(value) -> bool:
    return isinstance(value, np.ndarray) or (isinstance(value, list) and len(value) > SLICE)


def _flat(values: list) -> bool:
    """Whether a list holds only JSON scalars (no numpy values, which json and msgpack do not take)."""
    return all(v is None or type(v) in (float, int, str, bool) for v in values)


class Cancelled(Exception):
    """A build stopped between two slices: no request waits for its answer any more."""


def _yield(stop: threading.Event | None) -> None:
    """Between two slices: let the event loop's thread have the GIL, and stop if asked to."""
    time.sleep(0)
    if stop is not None and stop.is_set():
        raise Cancelled


def encode_json(data, stop: threading.Event | None = None) -> bytes:
    """``data`` (dicts, lists, numpy arrays, scalars) as JSON bytes, as ``json.dumps`` would
    (compact separators); raises :class:`Cancelled` between slices once ``stop`` is set."""
    parts: list[str] = []
    _json(data, parts, stop)
    return "".join(parts).encode()


def _json(data, parts: list[str], stop: threading.Event | None) -> None:
    if isinstance(data, dict):
        parts.append("{")
        for n, (key, value) in enumerate(data.items()):
            parts.append(("," if n else "") + _dumps(str(key)) + ":")
            _json(value, parts, stop)
        parts.append("}")
    elif _long(data):
        parts.append("[")
        for n, chunk in enumerate(_slices(data)):
            items = chunk.tolist() if isinstance(chunk, np.ndarray) else chunk
            if any(isinstance(v, (dict, list, np.ndarray)) for v in items):
                for m, item in enumerate(items):
                    parts.append("," if n or m else "")
                    _json(item, parts, stop)
            else:
                parts.append(("," if n else "") + _dumps(items)[1:-1])
            _yield(stop)
        parts.append("]")
    elif isinstance(data, list) and not _flat(data):
        parts.append("[")
        for n, item in enumerate(data):
            parts.append("," if n else "")
            _json(item, parts, stop)
        parts.append("]")
        _yield(stop)
    else:  # a scalar, or a short list of them: one call (a model's rows are thousands of such lists)
        parts.append(_dumps(data.item() if isinstance(data, np.generic) else data))


def encode_msgpack(data, stop: threading.Event | None = None) -> bytes:
    """``data`` as msgpack bytes, as ``msgpack.packb`` would pack its lists; raises
    :class:`Cancelled` between slices once ``stop`` is set."""
    packer = msgpack.Packer()
    parts: list[bytes] = []
    _msgpack(data, packer, parts, stop)
    return b"".join(parts)


def _msgpack(data, packer: msgpack.Packer, parts: list[bytes], stop: threading.Event | None) -> None:
    if isinstance(data, dict):
        parts.append(packer.pack_map_header(len(data)))
        for key, value in data.items():
            parts.append(packer.pack(key))
            _msgpack(value, packer, parts, stop)
    elif isinstance(data, list) and not _long(data) and _flat(data):
        parts.append(packer.pack(data))
    elif isinstance(data, (list, np.ndarray)):
        parts.append(packer.pack_array_header(len(data)))
        for chunk in _slices(data) if _long(data) else [data]:
            for item in chunk.tolist() if isinstance(chunk, np.ndarray) else chunk:
                _msgpack(item, packer, parts, stop)
            _yield(stop)
    else:
        parts.append(packer.pack(data.item() if isinstance(data, np.generic) else data))


class Busy(Exception):
    """Too many requests wait for answers to be built: the request should come back later."""


class AnswerCache:
    """Encoded answers by key, the ``size`` most recent kept and at most ``max_bytes`` of them
    (the largest collection's answers are tens of MB each); a key being built is built once, and
    every request for it awaits that one build. At most ``max_building`` keys are built at once
    (a build of the largest collection holds tens of MB and a core: forty-two variants asked at
    once took 2 GB); a request for another key waits its turn, and only past ``max_waiting``
    keys waiting is it refused (:class:`Busy`). ``statistics`` holds each collection's
    statistics per release state, read once for every answer built from them."""

    def __init__(self, size: int = 8, max_bytes: int = 256 * 2**20, max_building: int = 2, max_waiting: int = 64):
        self.size, self.max_bytes, self.max_waiting = size, max_bytes, max_waiting
        self._answers: OrderedDict[Hashable, asyncio.Future] = OrderedDict()
        self._building = asyncio.Semaphore(max_building)
        self.statistics: OrderedDict[Hashable, asyncio.Future] = OrderedDict()
        self._shared: OrderedDict[Hashable, asyncio.Future] = OrderedDict()
        self.closed = False

    def _trim(self) -> None:
        """Drop the least recent answers past ``size`` or ``max_bytes`` (the newest always stays)."""
        held = sum(len(f.result()) for f in self._answers.values() if f.done() and not f.exception())
        while len(self._answers) > 1 and (len(self._answers) > self.size or held > self.max_bytes):
            _, oldest = self._answers.popitem(last=False)
            if oldest.done() and not oldest.exception():
                held -= len(oldest.result())

    async def _built(self, produce: Callable[[threading.Event], Awaitable[bytes]], stop: threading.Event) -> bytes:
        async with self._building:
            return await produce(stop)

    async def get(
        self,
        key: Hashable,
        produce: Callable[[threading.Event], Awaitable[bytes]],
        gone: Callable[[], bool] | None = None,
    ) -> bytes:
        """The answer for ``key``: cached, or awaited from ``produce(stop)`` (once, however many
        ask). ``gone()`` says whether the asking client has left (polled every
        :data:`POLL_SECONDS`): it stops waiting (:class:`Cancelled`), and a build no client waits
        for any more is cancelled, ``stop`` set for the encoding on its worker thread."""
        future = self._answers.get(key)
        if future is None:
            if sum(not f.done() for f in self._answers.values()) >= self.max_waiting:
                raise Busy(f"{self.max_waiting} answers are waiting to be built; ask again in a moment")
            stop = threading.Event()
            future = asyncio.ensure_future(self._built(produce, stop))
            future.stop = stop  # type: ignore[attr-defined]
            self._answers[key] = future
        else:
            self._answers.move_to_end(key)
        future.waiting = getattr(future, "waiting", 0) + 1  # type: ignore[attr-defined]  (requests awaiting it)
        try:
            while not future.done():
                await asyncio.wait([future], timeout=POLL_SECONDS if gone is not None else None)
                if not future.done() and gone is not None and gone():
                    raise Cancelled
            if future.cancelled() and self.closed:
                raise Busy("the service is stopping; ask again in a moment")
            body = future.result()
        except BaseException:
            if future.done() and self._answers.get(key) is future:
                del self._answers[key]  # a failed build is not served again
            raise
        finally:
            future.waiting -= 1  # type: ignore[attr-defined]
            if future.waiting == 0 and not future.done():
                future.stop.set()  # type: ignore[attr-defined]
                future.cancel()
                if self._answers.get(key) is future:
                    del self._answers[key]
        self._trim()
        return body

    def close(self) -> None:
        """Stop every build under way (the service is stopping): their requests get :class:`Busy`."""
        self.closed = True
        for future in self._answers.values():
            if not future.done():
                future.stop.set()
                future.cancel()

    async def shared(self, key: Hashable, make: Callable[[], Awaitable]):
        """What ``make()`` gives for ``key``, made once for every answer that needs it (a model
        both formats encode); the two most recent kept."""
        return await _once(self._shared, key, make)

    async def statistics_of(self, key: Hashable, read: Callable[[], Awaitable]):
        """A collection's statistics at one release state (``key``), read once by ``read()`` for
        every answer built from them; the two most recent states kept."""
        return await _once(self.statistics, key, read)


async def _once(held: OrderedDict[Hashable, asyncio.Future], key: Hashable, make: Callable[[], Awaitable], keep: int = 2):
    """What ``make()`` gives for ``key``, made once however many ask and kept in ``held`` (the
    ``keep`` most recent); a failure is not kept."""
    future = held.get(key)
    if future is None:
        future = held[key] = asyncio.ensure_future(make())
        while len(held) > keep:
            held.popitem(last=False)
    try:
        return await asyncio.shield(future)
    except BaseException:
        if future.done() and held.get(key) is future:
            del held[key]
        raise
