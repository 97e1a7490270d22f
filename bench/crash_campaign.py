"""The crash campaign of `bench.reliability`: real ``concord run`` workers killed where a message used
to be lost, doubled or left waiting, on SQLite (one worker) and on PostgreSQL + Redis (two workers).

Each fault is a `Fault`: a name, what it does, and a coroutine that drives it against a `bench.crash_rig.Rig` —
the backend, the fake platforms and LLM, and the worker cluster it starts — returning the `Outcome` the rig
counted for the `Sent` messages it is accountable for (lost, doubled, late; the same count for every fault).
`run_fault` runs one fault on one backend with fresh services and fakes. A further scenario (the Redis faults
under Telegram polling) is one more `Fault` in `FAULTS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.cluster import Cluster, Sent
from bench.crash_rig import Outcome, Rig, restart_unarmed
from bench.scratch_db import scratch_postgres
from gateway.store import upgrade_database
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.faults.pgproxy import CommitCutter
from tests.faults.services import free_port, private_postgres
from tests.locks.conftest import PrivateRedis

__all__ = ["BACKENDS", "FAULTS", "FILLER", "Fault", "run_fault"]

BACKENDS = ("sqlite", "postgres")
FILLER = " ".join(f"the migration plan step {n} moves shard {n % 7} after the schema check" for n in range(60))


def echo(llm: FakeLLMServer) -> None:
    """The model answers each request at once with ``re: <last message>``."""
    llm.responder = lambda body: Reply(f"re: {str(body['messages'][-1]['content'])[:80]}")


# -- the faults ---------------------------------------------------------------------------------------------------


async def _inbox_kept(rig: Rig) -> Outcome:
    """Discord (never sent twice): SIGKILL right after a message is in the inbox, before it is handled."""
    cluster = await rig.cluster(platform="discord", armed="inbox-kept", CONCORD_INBOX__STALE_AFTER_SECONDS=3)
    sent = [await rig.discord_message("discord question 0")]
    # What Discord sends to a dead connection is gone (its guilds wait for the restart): the rest after it.
    await restart_unarmed(cluster)
    sent += [await rig.discord_message(f"discord question {n}") for n in range(1, 6)]
    return await rig.count(sent)


async def _request_stored(rig: Rig) -> Outcome:
    """SIGKILL after a compaction inside a turn stored the request, before the turn ended (webhook retry)."""
    cluster = await rig.cluster(armed="request-stored", CONCORD_LLM__CONTEXT_LENGTH=8000,
                                CONCORD_LLM__MAX_TOKENS=500, CONCORD_GATEWAY__HYGIENE_THRESHOLD=1.0,
                                CONCORD_COMPRESSION__PROTECT_LAST_N=4, CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    chat, sent = cluster.new_chat(), []
    process = cluster.workers[0].process
    assert process is not None
    died = asyncio.ensure_future(process.wait())
    for n in range(12):
        update, item = rig.telegram_message(cluster, chat, f"message {n}: {FILLER}")
        sent.append(item)
        delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
        await asyncio.wait([delivery, died], return_when=asyncio.FIRST_COMPLETED)
        if died.done() and not delivery.done():
            await restart_unarmed(cluster)
            await delivery
            break
        await delivery
    died.cancel()
    update, item = rig.telegram_message(cluster, chat, "and one more question")
    await cluster.deliver(update, prefer=0)
    return await rig.count([*sent, item])


async def _webhook_chats(rig: Rig, cluster: Cluster, texts: Sequence[str]) -> list[Sent]:
    """Three private chats, each sent ``texts`` in order (the chats at once), by webhook to alternating workers."""

    async def chat(number: int) -> list[Sent]:
        chat_id, items = cluster.new_chat(), []
        for n, text in enumerate(texts):
            update, item = rig.telegram_message(cluster, chat_id, text)
            items.append(item)
            await cluster.deliver(update, prefer=(number + n) % cluster.size)
        return items

    return [item for items in await asyncio.gather(*(chat(n) for n in range(3))) for item in items]


async def _command_applied(rig: Rig) -> Outcome:
    """SIGKILL after /pin stored its pin, before its reply and handled mark (the retry says it was cut off)."""
    cluster = await rig.cluster(armed="command-applied", CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    restart = asyncio.create_task(restart_unarmed(cluster))
    sent = await _webhook_chats(rig, cluster, ["hello", "/pin never force-push to main", "what is pinned?"])
    await restart
    return await rig.count(sent)


async def _answer_stored(rig: Rig) -> Outcome:
    """SIGKILL after an answer is stored with its mark, before it is sent (the ledger's recovery sends it)."""
    cluster = await rig.cluster(armed="answer-stored", CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3,
                                CONCORD_DELIVERY__RESEND_AFTER_SECONDS=2)
    restart = asyncio.create_task(restart_unarmed(cluster))
    sent = await _webhook_chats(rig, cluster, ["first", "second", "third"])
    await restart
    return await rig.count(sent)


async def _observed_queued(rig: Rig) -> Outcome:
    """Polling: SIGKILL while an observed group line waits for its batch (the inbox's recovery stores it)."""
    cluster = await rig.cluster(armed="observed-queued", CONCORD_TELEGRAM__MODE="polling",
                                CONCORD_TELEGRAM__POLLING_LEASE_SECONDS=3, CONCORD_INBOX__STALE_AFTER_SECONDS=3,
                                CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    group = -100_000 - cluster.new_chat()
    sent = []
    for n in range(6):
        text = f"observed line {n}"
        message = rig.telegram.inject_message(text, chat_id=group, user_id=7, user_name="u")
        sent.append(rig.said(Sent(group, message["message_id"], f"[u] {text}", chat_key=f"group:{group}")))
    await restart_unarmed(cluster)
    await asyncio.sleep(8.0)  # the lease and the claims expire (3 s), the inbox's recovery runs
    return await rig.count(sent)


async def _commit_lost(rig: Rig) -> Outcome:
    """A proxy between the worker and PostgreSQL cuts the connection once a turn's COMMIT went through."""
    proxy = CommitCutter(rig.database_url, (b"INSERT INTO messages", b"ON CONFLICT (key) DO UPDATE"))
    await proxy.start()
    try:
        cluster = await rig.cluster(database_url=proxy.url())
        proxy.armed = 3
        return await rig.count(await _webhook_chats(rig, cluster, ["first", "second", "third"]))
    finally:
        await proxy.aclose()


async def _database_down(rig: Rig) -> Outcome:
    """Discord while the database is down (PostgreSQL stopped; SQLite locked by another writer), SIGKILL
    mid-outage, the database back, the worker restarted."""
    async with _breakable_database(rig) as (url, down, up):
        cluster = await rig.cluster(platform="discord", database_url=url, CONCORD_INBOX__STALE_AFTER_SECONDS=3)
        await down()
        sent = [await rig.discord_message(f"asked during the outage {n}") for n in range(6)]
        spool = cluster.workdir / "worker-0" / "spool"
        deadline = time.monotonic() + 30
        while sum(p.read_bytes().count(b"\n") for p in spool.glob("*.jsonl")) < len(sent):
            if time.monotonic() > deadline:
                break  # counted as lost below, if they are
            await asyncio.sleep(0.1)
        cluster.kill(0)
        process = cluster.workers[0].process
        assert process is not None
        await process.wait()
        await up()
        await cluster.spawn(cluster.workers[0])
        return await rig.count(sent, database_url=url)


@contextlib.asynccontextmanager
async def _breakable_database(rig: Rig) -> AsyncIterator[tuple[str, Callable[[], Awaitable[None]],
                                                               Callable[[], Awaitable[None]]]]:
    if rig.backend == "postgres":
        with private_postgres() as server:
            if isinstance(server, str):
                raise RuntimeError(server)
            await upgrade_database(server.url)
            yield server.url, lambda: asyncio.to_thread(server.stop), lambda: asyncio.to_thread(server.start)
        return
    # SQLite: another process holds the write lock past the busy timeout ("database is locked").
    path = rig.workdir / "outage.db"
    url = f"sqlite+aiosqlite:///{path}"
    await upgrade_database(url)
    holder: list[sqlite3.Connection] = []

    def down() -> None:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN IMMEDIATE")
        holder.append(connection)

    def up() -> None:
        while holder:
            connection = holder.pop()
            connection.rollback()
            connection.close()

    try:
        yield url, lambda: asyncio.to_thread(down), lambda: asyncio.to_thread(up)
    finally:
        await asyncio.to_thread(up)


@dataclass(frozen=True)
class Fault:
    """One fault: its name, what it does, the backends it applies to, and how to drive it."""

    name: str
    run: Callable[[Rig], Awaitable[Outcome]]
    backends: tuple[str, ...] = BACKENDS

    @property
    def what(self) -> str:
        return (self.run.__doc__ or "").split("\n")[0]


FAULTS: dict[str, Fault] = {fault.name: fault for fault in (
    Fault("inbox-kept", _inbox_kept),
    Fault("request-stored", _request_stored),
    Fault("command-applied", _command_applied),
    Fault("answer-stored", _answer_stored),
    Fault("observed-queued", _observed_queued),
    Fault("commit-lost", _commit_lost, backends=("postgres",)),  # SQLite has no connection to lose
    Fault("database-down", _database_down),
)}


# -- running a fault ----------------------------------------------------------------------------------------------


async def run_fault(fault: Fault, backend: str, late_after_s: float, postgres_url: str | None) -> Outcome:
    """Run ``fault`` on ``backend`` with fresh services and fakes, and count what it left behind."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"concord-crash-{fault.name}-"))
    redis: PrivateRedis | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if backend == "postgres":
                if not postgres_url:
                    raise RuntimeError("set CONCORD_BENCH_POSTGRES_URL or CONCORD_TEST_POSTGRES_URL")
                binary = shutil.which("redis-server")
                if binary is None:
                    raise RuntimeError("redis-server not found")
                redis = PrivateRedis(binary=binary, port=free_port(), workdir=workdir)
                redis.start()
                url = await stack.enter_async_context(scratch_postgres(postgres_url, "concord_crash"))
            else:
                url = f"sqlite+aiosqlite:///{workdir / 'concord.db'}"
            await upgrade_database(url)
            llm = await stack.enter_async_context(FakeLLMServer())
            echo(llm)
            telegram, discord = FakeTelegram(), FakeDiscord()
            await telegram.start()
            stack.push_async_callback(telegram.stop)
            await discord.start()
            stack.push_async_callback(discord.stop)
            rig = Rig(backend, url, workdir, llm, telegram, discord, late_after_s, redis=redis)
            stack.push_async_callback(rig.aclose)
            outcome = await fault.run(rig)
    finally:
        if redis is not None:
            redis.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    outcome.seconds = time.monotonic() - started
    return outcome

