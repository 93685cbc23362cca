"""A randomised check in the spirit of a model check: whatever mix of sends, replays, batches and
concurrent duplicates reaches the service, each report id is counted exactly once.

Every report carries a unique marker: its DE value is its own index in a 400-value domain, so the
running support vector must be exactly 1 at every marker sent and 0 elsewhere; a double count
would show as a 2, a lost report as a 0."""

import asyncio
import random

import aiohttp
import msgpack
import numpy as np
import pytest

from aggregator.app import create_app, open_store, start_site
from participant import CollectionSpec, Feature

ADMIN = "model-check-admin-token-0123456789"
MARKERS = 200


SPEC = CollectionSpec([Feature("tag", [f"t{i}" for i in range(MARKERS)])], ["a", "b"], "DE", 1.0)


def marker_report(i: int) -> dict:
    # Input 1 is the feature jointly with the class: value i (of 400) marks report i.
    return {"id": i.to_bytes(16, "big"), "spec": SPEC.fingerprint_digest, "input": 1, "value": i}


async def post(session, url, body):
    async with session.post(url, data=msgpack.packb(body), headers={"Content-Type": "application/msgpack"}) as r:
        assert r.status in (200, 201), await r.text()


@pytest.mark.parametrize("seed", range(4))
async def test_every_schedule_counts_each_report_once(database, seed):
    store, _ = await open_store(database, ADMIN)
    spec = SPEC
    collection = await store.create_collection("m", spec, 0)
    runner, base = await start_site(await create_app(store))
    url = f"{base}/collections/m/reports"
    rng = random.Random(seed)
    sent: set[int] = set()
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                action = rng.choice(["single", "replay", "batch", "concurrent"])
                if action == "single" or (action == "replay" and not sent):
                    i = rng.randrange(2 * MARKERS)
                    await post(session, url, marker_report(i))
                    sent.add(i)
                elif action == "replay":
                    await post(session, url, marker_report(rng.choice(sorted(sent))))
                elif action == "batch":
                    ids = [rng.randrange(2 * MARKERS) for _ in range(rng.randint(1, 12))]
                    ids += rng.sample(ids, k=min(3, len(ids)))  # duplicates inside the batch
                    await post(session, url, {"reports": [marker_report(i) for i in ids]})
                    sent.update(ids)
                else:
                    i = rng.randrange(2 * MARKERS)
                    copies = [post(session, url, marker_report(i)) for _ in range(rng.randint(2, 8))]
                    await asyncio.gather(*copies)
                    sent.add(i)
        state = (await store.statistics(collection)).states[1]
        expected = np.zeros(2 * MARKERS)
        expected[sorted(sent)] = 1
        np.testing.assert_array_equal(state.support, expected)
        assert state.n == len(sent) == await store.count_reports(collection)
    finally:
        await runner.cleanup()
        await store.close()
