"""What the crash campaign (`bench.crash_campaign`) runs each fault against, and the tally of what it left behind.

A `Rig` is one backend's services (SQLite with one worker, or PostgreSQL + a private Redis with two), the fake
platforms and LLM, and the worker clusters a fault starts on them. It counts, the same way for every fault, from
what the fake platforms received and what the store holds: *lost* (a message never answered, or never stored),
*doubled* (answered or stored more than once) and *late* (answered more than ``late_after_s`` seconds after it
was sent), into an `Outcome`; `table` prints one row per fault and backend.

Workers killed at a crash point die by their own SIGKILL (`gateway.ops.faults`); `restart_unarmed` starts each again
without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import distinct, func, select

from bench.cluster import Cluster, Sent
from gateway.ops.faults import ENV as KILL_AT
from gateway.store.database import create_engine
from gateway.store.models import MessageRow, SessionRow
from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegram
from tests.locks.conftest import PrivateRedis

__all__ = ["Outcome", "Rig", "restart_unarmed", "stored_counts", "table"]

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
