"""The crash campaign of `bench.reliability` (issue 30): real ``concord run`` workers killed where a message used
to be lost, doubled or left waiting, on SQLite (one worker) and on PostgreSQL + Redis (two workers).

Each fault is a `Fault`: a name, what it does, and a coroutine that drives it against a `Rig` — the backend, the
fake platforms and LLM, and the worker cluster it starts — returning the `Sent` messages it is accountable for.
The rig then counts, the same way for every fault, from what the fake platforms received and what the store
holds: *lost* (a message never answered, or never stored), *doubled* (answered or stored more than once) and
*late* (answered more than ``--late-after`` seconds after it was sent); `table` prints one row per fault and
backend. A further scenario (the Redis faults under Telegram polling) is one more `Fault` in `FAULTS`.

Workers killed at a crash point die by their own SIGKILL (`gateway.faults`); each is started again without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import distinct, func, select

from bench.cluster import Cluster, Sent
from bench.scratch_db import scratch_postgres
from gateway.faults import ENV as KILL_AT
from gateway.store import upgrade_database
from gateway.store.database import create_engine
from gateway.store.models import MessageRow, SessionRow
from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.faults.pgproxy import CommitCutter
from tests.faults.services import free_port, private_postgres
from tests.locks.conftest import PrivateRedis

__all__ = ["BACKENDS", "FAULTS", "FILLER", "Fault", "Outcome", "Rig", "restart_unarmed", "run_fault", "stored_counts",
           "table"]

BACKENDS = ("sqlite", "postgres")
FILLER = " ".join(f"the migration plan step {n} moves shard {n % 7} after the schema check" for n in range(60))
ANSWER_WITHIN_S = 90.0


@dataclass
class Outcome:
    """What one fault on one backend left behind."""

    sent: int = 0
    answered: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    seconds: float = 0.0


@dataclass
class Rig:
    """One backend's services, the fakes, and the workers a fault starts on them."""

    backend: str
    database_url: str
    workdir: Path
    llm: FakeLLMServer
    telegram: FakeTelegram
    discord: FakeDiscord
    late_after_s: float
    redis: PrivateRedis | None = None  # the backend's own Redis, for faults that kill, pause or slow it
    clusters: list[Cluster] = field(default_factory=list)
    sent_at: dict[int, float] = field(default_factory=dict)

    @property
    def redis_url(self) -> str | None:
        """The Redis the workers share (None on SQLite: everything in-process)."""
        return self.redis.url if self.redis is not None else None

    @property
    def workers(self) -> int:
        """One worker on SQLite (it takes the database's lock), two on PostgreSQL + Redis."""
        return 1 if self.redis_url is None else 2

    async def cluster(self, *, platform: str = "telegram", armed: str | None = None,
                      database_url: str | None = None, **env: Any) -> Cluster:
        """Start the workers; worker 0 dies at crash point ``armed``. Discord workers split the shards."""
        worker_env = [dict[str, str]() for _ in range(self.workers)]
        settings = {k: str(v) for k, v in env.items()}
        if platform == "discord":
            settings.update(self.discord.process_env(), CONCORD_DISCORD__STREAMING="false",
                            CONCORD_DISCORD__SHARD_COUNT=str(self.workers))
            for index, shard in enumerate(worker_env):
                shard["CONCORD_DISCORD__SHARD_IDS"] = str(index)
        if armed:
            worker_env[0][KILL_AT] = armed
        cluster = Cluster(self.workers, database_url or self.database_url, self.redis_url,
                          self.telegram if platform == "telegram" else None, self.llm.openai_base_url,
                          self.workdir / f"cluster-{len(self.clusters)}", env=settings, worker_env=worker_env)
        self.clusters.append(cluster)
        if settings.get("CONCORD_TELEGRAM__MODE") != "polling":
            await cluster.start()
            return cluster
        # The armed worker starts alone, so it is the one that takes the polling lease.
        await cluster.start(count=1)
        await self._holding_lease(cluster, "worker-0")
        for worker in cluster.workers[1:]:
            await cluster.spawn(worker)
        return cluster

    async def _holding_lease(self, cluster: Cluster, holder: str) -> None:
        if self.redis_url is None:
            return  # one worker, no lease to share
        client = Redis.from_url(self.redis_url)
        try:
            deadline = time.monotonic() + 30
            while await client.get(f"{cluster.key_prefix}lease:telegram-polling") != holder.encode():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{holder} never took the polling lease")
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def said(self, item: Sent) -> Sent:
        """Note that ``item`` was sent now."""
        self.sent_at[item.message_id] = time.monotonic()
        return item

    def telegram_message(self, cluster: Cluster, chat: int, text: str) -> tuple[dict[str, Any], Sent]:
        """A private-chat update for webhook delivery, noted as sent."""
        update, item = cluster.message(chat, text)
        return update, self.said(item)

    async def discord_message(self, text: str) -> Sent:
        """A direct message to the Discord bot (shard 0's), noted as sent."""
        message = await self.discord.inject_message(text, channel_id=DM_CHANNEL_ID)
        return self.said(Sent(DM_CHANNEL_ID, int(message["id"]), text, chat_key=f"dm:{DM_CHANNEL_ID}"))

    def replies(self) -> dict[int, list[float]]:
        """When each message was answered (by the id it replies to), on every fake platform."""
        answered: dict[int, list[float]] = {}
        for reply in self.telegram.sent_messages:
            if reply.reply_to_message_id is not None:
                answered.setdefault(reply.reply_to_message_id, []).append(reply.at)
        for sent in self.discord.sent_messages:
            if sent.reference_id is not None:
                answered.setdefault(sent.reference_id, []).append(sent.at)
        return answered

    async def answered(self, items: Sequence[Sent], within_s: float = ANSWER_WITHIN_S) -> None:
        """Wait until each of ``items`` has an answer (or the time is up: they count as lost)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if all(i.message_id in self.replies() for i in items):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # time for a (wrong) second answer

    async def count(self, sent: Sequence[Sent], database_url: str | None = None) -> Outcome:
        """What became of ``sent``: each addressed message answered once and stored once, each observed group
        line stored once; answers later than ``late_after_s`` count as late."""
        observed = [i for i in sent if i.chat_key.startswith("group:")]
        addressed = [i for i in sent if i not in observed]
        await self.answered(addressed)
        replies = self.replies()
        stored = await stored_counts(database_url or self.database_url, sent)
        outcome = Outcome(sent=len(sent), answered=sum(1 for i in addressed if replies.get(i.message_id)))
        for item in sent:
            label, answers = f"{item.chat_id}/{item.message_id}", replies.get(item.message_id, [])
            if not stored[item.message_id] or (item in addressed and not answers):
                outcome.lost.append(label)
            elif stored[item.message_id] > 1 or len(answers) > 1:
                outcome.doubled.append(label)
            if answers:
                waited = min(answers) - self.sent_at[item.message_id]
                outcome.slowest_s = max(outcome.slowest_s, waited)
                if waited > self.late_after_s:
                    outcome.late.append(label)
        return outcome

    async def aclose(self) -> None:
        for cluster in self.clusters:
            await cluster.aclose()


async def restart_unarmed(cluster: Cluster, index: int = 0) -> None:
    """Wait for worker ``index`` to die at its crash point, then start it again without one."""
    process = cluster.workers[index].process
    assert process is not None
    await asyncio.wait_for(process.wait(), ANSWER_WITHIN_S)
    cluster.worker_env = [{k: v for k, v in env.items() if k != KILL_AT} for env in cluster.worker_env]
    await cluster.spawn(cluster.workers[index])


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


# -- running and counting -----------------------------------------------------------------------------------------


async def stored_counts(database_url: str, items: Sequence[Sent]) -> dict[int, int]:
    """How many times each item's text was stored as a user message of its chat (a compaction's own rows are
    marked compacted; the rows it carries over keep their original's time). Commands are not stored: 1."""
    engine = create_engine(database_url)
    counts: dict[int, int] = {}
    try:
        async with engine.connect() as conn:
            for item in items:
                counts[item.message_id] = 1 if item.text.startswith("/") else int((await conn.execute(
                    select(func.count(distinct(MessageRow.created_at)))
                    .join(SessionRow, SessionRow.id == MessageRow.session_id)
                    .where(SessionRow.chat_key == item.chat_key, MessageRow.role == "user",
                           MessageRow.compacted.is_(False), MessageRow.search_text.contains(item.text[:60]))
                )).scalar_one())
    finally:
        await engine.dispose()
    return counts


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


def table(rows: Sequence[tuple[str, str, Outcome | str]]) -> str:
    """The campaign's figures, one row per (fault, backend): an `Outcome`, or why it did not run."""
    lines = [f"{'fault':<22} {'backend':<18} {'sent':>5} {'answered':>9} {'lost':>5} {'doubled':>8} {'late':>5} "
             f"{'slowest':>8} {'time':>6}"]
    for name, backend, outcome in rows:
        where = "SQLite, 1 worker" if backend == "sqlite" else "PG + Redis, 2"
        if isinstance(outcome, str):
            lines.append(f"{name:<22} {where:<18} {outcome}")
            continue
        lines.append(f"{name:<22} {where:<18} {outcome.sent:>5} {outcome.answered:>9} {len(outcome.lost):>5} "
                     f"{len(outcome.doubled):>8} {len(outcome.late):>5} {outcome.slowest_s:>7.1f}s "
                     f"{outcome.seconds:>5.0f}s")
        for kind in ("lost", "doubled"):
            if getattr(outcome, kind):
                lines.append(f"    {kind}: {', '.join(getattr(outcome, kind))}")
    return "\n".join(lines)
