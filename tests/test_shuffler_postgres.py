"""Several shuffler instances on one PostgreSQL, as real processes: every instance takes reports,
one releases a collection's batch at a time, and nothing acknowledged is lost or counted twice
while an instance is SIGKILLed again and again (mid-release among other moments), the
aggregator's answers to batches it counted are lost, and PostgreSQL restarts (fast and
immediate)."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from participant import Participant
from participant.sealing import seal
from participant.view import ShuffledView
from participant.wire import pack_report

from .hostile import Proxy
from .postgres import PostgreSQL, server_directory
from .servers import AUTH, Server, ShufflerProcess, token_file
from .test_shuffler import RECORD, call, create

PEOPLE, FLOOR = 1200, 25


async def send(urls: list[str], cid: str, sealed: bytes, rng: random.Random) -> str:
    """One device's report, sent to one shuffler instance after another until one stores it (as a
    device behind a load balancer retries): ``accepted`` or ``duplicate``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for attempt in range(200):
            url = rng.choice(urls)
            try:
                async with session.post(f"{url}/collections/{cid}/reports", data=sealed,
                                        headers={"Content-Type": "application/ldpnb-sealed"}) as answer:  # fmt: skip
                    data = await answer.json(content_type=None)
                    if answer.status in (200, 201):
                        return data["status"]
            except (aiohttp.ClientError, TimeoutError, ValueError):
                pass
            await asyncio.sleep(0.05 * min(attempt + 1, 10))
    raise AssertionError("a report was never stored")


FAULTS = ("kill", "lose", "restart-fast", "kill", "lose", "restart-immediate", "kill", "kill", "lose", "restart-fast", "kill", "lose")


async def fault(kind: str, instances: list[ShufflerProcess], pg: PostgreSQL, liar: Proxy, rng: random.Random) -> None:
    """SIGKILL an instance and start it again, lose the aggregator's next answers, or restart PostgreSQL."""
    loop = asyncio.get_running_loop()
    if kind == "kill":
        victim = rng.choice(instances)
        victim.kill()
        await loop.run_in_executor(None, victim.start)
    elif kind == "lose":
        liar.lose += 2
    else:
        await loop.run_in_executor(None, pg.restart, kind.split("-")[1])


async def test_several_instances_on_postgresql_count_every_report_once_through_kills_lost_answers_and_restarts(tmp_path):
    token = token_file(tmp_path / "token.txt")
    rng = random.Random(7)
    server = Server(tmp_path / "aggregator.sqlite3").start()
    with server_directory("shuffler") as directory:
        pg = PostgreSQL(directory).start()
        instances = []
        try:
            url = pg.create_database("shuffler")
            async with Proxy(server.url) as liar:
                instances = [
                    ShufflerProcess(url, liar.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0",
                                    "--per-address", "0")  # fmt: skip
                    for _ in range(3)
                ]
                for instance in instances:
                    await asyncio.to_thread(instance.start)
                create(server, "c", instances[0].url, token, min_batch=FLOOR)
                view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{instances[1].url}/collections/c/view"))
                participant = Participant(view.spec)
                sealed = [seal(pack_report(participant.report(RECORD), view.spec), view) for _ in range(PEOPLE)]
                urls = [i.url for i in instances]
                outcomes = []
                for wave, kind in enumerate(FAULTS):  # devices arriving while a fault strikes
                    part = sealed[wave * PEOPLE // len(FAULTS) : (wave + 1) * PEOPLE // len(FAULTS)]
                    sending = asyncio.gather(*(send(urls, "c", item, rng) for item in part))
                    await asyncio.sleep(rng.uniform(0.0, 0.4))
                    await fault(kind, instances, pg, liar, rng)
                    outcomes += await sending
                # Every report stored: accepted once, or a duplicate of one stored by a commit whose answer was lost.
                assert set(outcomes) <= {"accepted", "duplicate"} and len(outcomes) == PEOPLE

                def status() -> dict:
                    return call(f"{server.url}/collections/c/status", headers=AUTH)

                async def left() -> int:  # reports waiting at the shuffler, exactly (its database)
                    import asyncpg

                    conn = await asyncpg.connect(url)
                    try:
                        return await conn.fetchval("SELECT count(*) FROM waiting") + await conn.fetchval(
                            "SELECT coalesce(sum(people), 0) FROM batches"
                        )
                    finally:
                        await conn.close()

                for _ in range(600):  # until every report is counted or waits, too few for a batch
                    found, waiting = await asyncio.to_thread(status), await left()
                    if found["reports"] + waiting == PEOPLE and waiting < FLOOR:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.5)  # a few more rounds: nothing is forwarded again into the count
                found, waiting = await asyncio.to_thread(status), await left()
        finally:
            for instance in instances:
                instance.stop()
            pg.stop("fast")
            server.stop()
    batches = found["batches"]
    assert found["reports"] + waiting == PEOPLE and waiting < FLOOR, (found, waiting)  # nothing lost
    assert found["reports"] == batches["reports"] - batches["junk"], found  # no report in two batches
    assert batches["junk"] == 0 and batches["smallest"] >= FLOOR, found
    assert liar.seen[("POST", "/collections/c/shuffled")] > batches["batches"]  # lost answers were forwarded again


async def test_a_collection_closed_at_one_instance_takes_no_report_another_acknowledges_and_strands(tmp_path, postgres):
    """Two instances on one database: devices post to the second, eight at a time, while the
    first closes the collection with pad. Every report the second answered 201 is counted by the
    aggregator; the rest were answered 410 and never stored (the second learns of the close from
    the store, in the commit that would have stored them)."""
    from .test_shuffler import counted, wait_for
    from .test_shuffler_bounds import posting_while_closing

    token = token_file(tmp_path / "token.txt")
    server = Server(tmp_path / "aggregator.sqlite3").start()
    url = postgres.create_database("closing")
    instances = [
        ShufflerProcess(url, server.url, tmp_path / "token.txt", "--interval", "0.3", "--min-batch", "2", "--dummies", "0", "--per-address", "0",
                        "--per-collection", "0")  # fmt: skip
        for _ in range(2)
    ]
    try:
        for instance in instances:
            await asyncio.to_thread(instance.start)
        create(server, "c", instances[0].url, token, min_batch=10, dummies=0)
        view = ShuffledView.from_dict(await asyncio.to_thread(call, f"{instances[1].url}/collections/c/view"))
        participant = Participant(view.spec)
        statuses, done = await posting_while_closing(
            f"{instances[1].url}/collections/c/reports", f"{instances[0].url}/collections/c/close", token,
            [seal(pack_report(participant.report(RECORD), view.spec), view) for _ in range(400)],
        )  # fmt: skip
        accepted, refused = statuses.count(201), statuses.count(410)
        assert accepted + refused == 400 and refused > 0, (accepted, refused)
        assert done["waiting"] == 0
        await asyncio.to_thread(wait_for, lambda: counted(server, "c") == accepted + done["padding"], 60)
    finally:
        for instance in instances:
            instance.stop()
        server.stop()
