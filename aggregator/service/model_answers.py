"""What a released collection answers: its estimates and its model, built once per state and cached."""

from __future__ import annotations

import gzip
import math

from aiohttp import web

from participant.dummies import dummy_variance

from ..estimation.count_noise import cell_variances
from ..estimation.estimators import ESTIMATORS, build_model, strength_refused
from ..estimation.evidence import evidence
from ..estimation.smoothing import STRENGTHS
from ..estimation.statistics import CollectionStatistics
from ..store import Collection
from .answers import Busy, Cancelled, encode_json, encode_msgpack
from .collection_routes import require_released
from .errors import APIError
from .keys import ANSWERS, STORE
from .plumbing import GZIP_LEVEL, MSGPACK, MSGPACK_TYPES, accepts_gzip, get_collection, off_loop, send_in_slices

routes = web.RouteTableDef()
DEFAULT_ESTIMATOR = "normsub"


def _estimator(request: web.Request) -> str:
    name = request.query.get("estimator", DEFAULT_ESTIMATOR)
    if name not in ESTIMATORS:
        raise APIError(400, f"unknown estimator {name!r}; choose one of {', '.join(ESTIMATORS)}")
    return name


def _strength(request: web.Request, collection: Collection, estimator: str) -> float | None:
    """The ``strength`` the client asked the model to be smoothed at (None: the default, 1).
    Only the listed strengths (:data:`~aggregator.estimation.smoothing.STRENGTHS`):
    every other number would be one more model to build and cache per release state, which anyone
    could ask for."""
    raw = request.query.get("strength")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if value not in STRENGTHS:
        raise APIError(400, f"strength must be one of {', '.join(f'{s:g}' for s in STRENGTHS)}, not {raw!r}")
    if refused := strength_refused(collection.spec, estimator):
        raise APIError(400, f"strength {raw!r}: {refused}")
    return value


def _estimates(collection: Collection, stats: CollectionStatistics) -> dict:
    """Every input's estimates from the people's reports (a shuffler's dummies taken out in
    expectation), and their variance: the people's noise and what the dummies add."""
    spec = collection.spec
    people = stats.people()
    added = dummy_variance(spec, stats.dummies) if stats.dummies else [0.0] * spec.n_inputs
    inputs = []
    rows = zip(spec.input_names, spec.oracles, people.states, people.estimated_counts(), added)
    for i, (name, oracle, state, estimate, extra) in enumerate(rows):
        if spec.model == "discrete":
            variance = cell_variances(oracle, state.n, estimate) + extra
        elif i == 0:
            variance = oracle.variance(state.n) + extra
        else:  # a mean: the dummies' variance is of the summed support
            variance = oracle.variance(state.n) + extra / max(state.n, 1) ** 2
        inputs.append({"name": name, "reports": state.n, "size": oracle.state_size, "estimate": estimate, "variance": variance})
    return {
        "collection": collection.id,
        "reports": stats.n_reports,
        "dummies": stats.dummies,
        "layout": "input 0 is the class (index c); for a discrete model input i > 0 is feature i-1 jointly "
        "with the class (index a*k + c); for a gaussian model the estimate is the mean class-hiding vector",
        "inputs": inputs,
    }


def _model(collection: Collection, stats: CollectionStatistics, estimator: str, strength: float | None) -> dict:
    answer = {
        "collection": collection.id,
        "estimator": estimator,
        "reports": stats.n_reports,
    }
    built = build_model(stats, estimator, strength=strength)
    answer.update(built.to_dict())
    if getattr(built, "choice", None) is not None:  # auto: which estimator its reports chose, and why
        answer["choice"] = built.choice.to_dict()
    answer["evidence"] = stats.derived("evidence", evidence)
    return answer


async def cached_answer(request: web.Request, collection: Collection, build, *extra, halves: bool = False) -> web.Response:
    """``build(collection, statistics, *extra)`` encoded as the client asked (JSON or msgpack),
    from the app's :class:`~aggregator.service.answers.AnswerCache`: one build per release state (the
    count of reports says which), encoded in slices on a worker thread, from statistics read
    once per release state whatever the answer. With ``halves`` the statistics carry the stored
    reports' two halves (:meth:`~aggregator.store.base.Store.statistics_halves`, read for this
    answer alone: only the ``auto`` estimator needs them)."""
    counted = await require_released(request, collection)
    as_msgpack = any(t in request.headers.get("Accept", "") for t in MSGPACK_TYPES)
    encode = encode_msgpack if as_msgpack else encode_json
    store = request.app[STORE]

    answers = request.app[ANSWERS]
    built = (build.__name__, collection.key, counted, *extra)
    gzipped = accepts_gzip(request)

    async def produce(stop) -> bytes:
        stats = await answers.statistics_of((collection.key, counted), lambda: store.statistics(collection))
        if halves:
            split = await store.statistics_halves(collection, stats.dummies)
            stats = stats.copy()
            stats.halves = split
        # Built once for both formats (and the statistics' evidence once for every answer).
        data = await answers.shared(built, lambda: off_loop(build, collection, stats, *extra))
        body = await off_loop(encode, data, stop)
        return await off_loop(lambda: gzip.compress(body, GZIP_LEVEL, mtime=0)) if gzipped else body

    def gone() -> bool:
        return request.transport is None or request.transport.is_closing()

    try:
        body = await answers.get((*built, as_msgpack, gzipped), produce, gone)
    except Busy as exc:
        raise APIError(503, str(exc), {"Retry-After": "2"}) from None
    except Cancelled:
        raise APIError(499, "the client left before its answer was built") from None
    encoded = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"} if gzipped else {"Vary": "Accept-Encoding"}
    return await send_in_slices(request, body, MSGPACK if as_msgpack else "application/json", encoded)


@routes.get("/collections/{collection_id}/estimates")
async def estimates(request: web.Request) -> web.Response:
    collection = await get_collection(request)
    return await cached_answer(request, collection, _estimates)


@routes.get("/collections/{collection_id}/model")
async def model(request: web.Request) -> web.Response:
    collection = await get_collection(request)
    estimator = _estimator(request)
    if estimator == "auto" and collection.spec.model == "gaussian":
        raise APIError(400, "estimator 'auto' chooses among the discrete model's estimators; a gaussian model has none to choose")
    strength = _strength(request, collection, estimator)
    return await cached_answer(request, collection, _model, estimator, strength, halves=estimator == "auto")
