"""Scheduled jobs once per schedule across real ``concord run`` workers on PostgreSQL + Redis: three
workers sweep every two seconds and a ``concord sweep`` (what the systemd timer or cron runs) joins in; every
run of the schedule is swept by exactly one of them. And one sweep at a time: a ``concord sweep``
that knows no schedule does nothing while a worker's sweep runs."""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from agent.compression.summary import SUMMARIZER_SYSTEM
from agent.tokens import get_counter
from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import chatter
from tests.scale.conftest import ClusterFactory

CRON = "*/2 * * * * *"  # six fields: every two seconds
CLAIMED = re.compile(r"scheduled job hygiene-sweep: (job:hygiene-sweep:\S+) claimed here")
CLI_CLAIMED = re.compile(r"sweep: claimed the run of (\S+)")


async def test_each_run_of_the_sweep_is_swept_by_one_process(cluster_factory: ClusterFactory, redis_url: str) -> None:
    cluster = await cluster_factory(3, CONCORD_GATEWAY__SWEEP_CRON=CRON, CONCORD_LOGGING__LEVEL="DEBUG")
    await asyncio.sleep(4)
    env = {**cluster._worker_env(cluster.workers[0]), "CONCORD_GATEWAY__WORKER_ID": "timer"}
    cli = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli.main", "sweep", cwd=str(cluster.workdir),
                                               env=env, stdout=asyncio.subprocess.PIPE,
                                               stderr=asyncio.subprocess.PIPE)
    out, err = await cli.communicate()
    assert cli.returncode == 0, err.decode()[-2000:]
    await asyncio.sleep(3)
    # A run that fires while the workers are being stopped may be claimed by one already shutting down, which
    # then never sweeps it (the next run would): only the runs before the stopping began are checked.
    stopping = datetime.now(UTC)
    for worker in cluster.workers:
        # The worker's log says why when it does not stop cleanly (its folder goes with the test).
        assert await cluster.stop(worker.index) == 0, worker.log_path.read_text()[-3000:]
    runs = [(w.index, key) for w in cluster.workers for key in CLAIMED.findall(w.log_path.read_text())]
    swept = [w.log_path.read_text().count("sweep: 0 candidate(s)") for w in cluster.workers]
    skipped = "already ran in another process" in out.decode()
    cli_runs = [f"job:hygiene-sweep:{slot}" for slot in CLI_CLAIMED.findall(err.decode())]
    assert skipped != bool(cli_runs)  # the timer's sweep either found its run swept, or swept it
    client = Redis.from_url(redis_url)
    try:
        claimed = sorted(k.decode().removeprefix(f"{cluster.key_prefix}claim:")
                         for k in await client.keys(f"{cluster.key_prefix}claim:job:hygiene-sweep:*"))
    finally:
        await client.aclose()

    def before_stopping(key: str) -> bool:
        return datetime.fromisoformat(key.removeprefix("job:hygiene-sweep:")) < stopping

    claimed = [key for key in claimed if before_stopping(key)]
    keys = [key for _, key in runs if before_stopping(key)] + cli_runs
    assert len(claimed) >= 3  # about 8 s of a two-second schedule
    slots = [datetime.fromisoformat(key.removeprefix("job:hygiene-sweep:")) for key in claimed]
    assert all((b - a).total_seconds() == 2 for a, b in itertools.pairwise(slots))  # no run left out
    assert sorted(keys) == claimed  # every run swept, none twice
    assert sum(swept) == len(runs)  # and each run a worker logged as claimed really swept


async def test_a_cron_sweep_without_a_schedule_never_runs_beside_a_workers_sweep(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, database_url: str) -> None:
    """The cron file's set-up (``gateway.sweep_cron: off`` in the sweep's environment, so it knows no slot to
    claim) while a worker still sweeps on its own schedule: the worker's sweep takes ~6 s (three sessions, a
    2 s summary model); a ``concord sweep`` started meanwhile does nothing and says why, instead of sweeping
    beside it."""
    summaries: list[float] = []

    def respond(body: dict[str, Any]) -> Reply:
        if SUMMARIZER_SYSTEM in str(body.get("messages")):
            summaries.append(time.monotonic())
            return Reply("## Goal\nthe user chatted.", delay=2.0)
        return Reply("ok")

    fake_llm.responder = respond
    counter = get_counter()
    async with await Store.open(database_url, migrate=False) as store:
        for n in range(3):
            record = await store.sessions.get_or_create_active("telegram", f"dm:{n}")
            rows = chatter(40, words=100)
            await store.messages.append(record.id, rows, [counter.count_message(m) for m in rows])
    cluster = await cluster_factory(1, CONCORD_GATEWAY__SWEEP_CRON="* * * * * *", CONCORD_LLM__CONTEXT_LENGTH="8000",
                                    CONCORD_GATEWAY__HYGIENE_HARD_MESSAGE_LIMIT="30")
    deadline = time.monotonic() + 60
    while not summaries:
        assert time.monotonic() < deadline, "the worker never swept"
        await asyncio.sleep(0.05)
    env = {**cluster._worker_env(cluster.workers[0]), "CONCORD_GATEWAY__WORKER_ID": "cron",
           "CONCORD_GATEWAY__SWEEP_CRON": "off"}
    cli = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli.main", "sweep", cwd=str(cluster.workdir),
                                               env=env, stdout=asyncio.subprocess.PIPE,
                                               stderr=asyncio.subprocess.PIPE)
    out, err = await cli.communicate()
    assert cli.returncode == 0, err.decode()[-2000:]
    assert "Another process is sweeping right now" in out.decode(), out.decode()
    assert "compacted" not in err.decode()
    log = cluster.workers[0].log_path
    while (done := log.read_text().count(" compacted (hygiene: message count)")) < 3:
        assert time.monotonic() < deadline, f"{done} of 3 sessions swept"
        await asyncio.sleep(0.05)
    assert len(summaries) == 3  # one summary per session: nobody swept them again
