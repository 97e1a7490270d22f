"""Discord shards over real ``concord run`` workers on PostgreSQL + Redis: one bot of two shards,
worker 0 running shard 0 and worker 1 shard 1, against the fake Discord, which sends each guild's events only
on its shard's connection and DMs on shard 0, as Discord does. Every message is answered once, in order per
channel, each guild by its shard's worker; while a worker is SIGKILLed its shard's guilds get nothing (a shard
is one connection), and once it is restarted they are answered again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.cluster import Cluster, Sent, check_exactly_once
from tests.fakes.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    FakeDiscord,
    SentMessage,
    shard_of,
)
from tests.fakes.discord_server import OTHER_CHANNEL_ID as CHANNEL_Y
from tests.fakes.discord_server import OTHER_GUILD_ID as GUILD_Y
from tests.fakes.llm_server import FakeLLMServer
from tests.scale.conftest import ClusterFactory
from tests.scale.test_workers_e2e import echo

# Guild X is the fake's first guild (GUILD_ID, shard 0 of 2), guild Y the other (shard 1).
SHARDS = 2
ANSWER_WITHIN_S = 60.0


def _discord_reply(reply: SentMessage) -> tuple[int, int | None]:
    return reply.channel_id, reply.reference_id


async def _say(fake: FakeDiscord, channel_id: int, text: str) -> Sent:
    """Post ``text`` (mentioning the bot in a guild); what its session stores is ``[alice] text`` there."""
    if channel_id == DM_CHANNEL_ID:
        message = await fake.inject_message(text, channel_id=channel_id)
        return Sent(channel_id, int(message["id"]), text, chat_key=f"dm:{channel_id}")
    message = await fake.inject_message(f"<@{BOT_ID}> {text}", channel_id=channel_id)
    return Sent(channel_id, int(message["id"]), f"[alice] {text}", chat_key=f"group:{channel_id}")


async def _until(done: Callable[[], bool], within_s: float = ANSWER_WITHIN_S) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.05)


def _answers(fake: FakeDiscord, items: list[Sent]) -> int:
    ids = {item.message_id for item in items}
    return sum(1 for m in fake.sent_messages if m.reference_id in ids)


async def _counts(cluster: Cluster, name: str) -> list[float]:
    return [await cluster.metric(i, name) for i in range(cluster.size)]


async def test_each_guild_is_answered_once_by_its_shards_worker_and_waits_for_it_when_it_dies(
        cluster_factory: ClusterFactory, fake_discord: FakeDiscord, fake_llm: FakeLLMServer,
        database_url: str) -> None:
    echo(fake_llm)
    fake_discord.add_guild(GUILD_Y, CHANNEL_Y)
    assert (shard_of(GUILD_ID, SHARDS), shard_of(GUILD_Y, SHARDS)) == (0, 1)
    cluster = await cluster_factory(
        2, discord=fake_discord, worker_env=[{"CONCORD_DISCORD__SHARD_IDS": str(i)} for i in range(SHARDS)],
        CONCORD_DISCORD__SHARD_COUNT=SHARDS, CONCORD_DISCORD__STREAMING="false")
    connections = [c for c in fake_discord.open_connections() if c.identify is not None]
    assert sorted(c.shard for c in connections) == [(0, 2), (1, 2)]
    guilds = {c.shard[0]: [int(d["id"]) for e, d in c.events if e == "GUILD_CREATE"] for c in connections}
    assert guilds == {0: [GUILD_ID], 1: [GUILD_Y]}

    # Both workers up: the three channels' messages interleaved, none waiting for an answer.
    sent: list[Sent] = []
    for n in range(4):
        for channel, name in ((CHANNEL_ID, "x"), (CHANNEL_Y, "y"), (DM_CHANNEL_ID, "dm")):
            sent.append(await _say(fake_discord, channel, f"{name} {n}"))
    await fake_discord.wait_for_messages(len(sent), within_s=ANSWER_WITHIN_S)
    await asyncio.sleep(1.0)  # room for a (wrong) second answer
    assert await check_exactly_once(sent, fake_discord.sent_messages, database_url, platform="discord",
                                    reply_of=_discord_reply) == []
    for item in sent:  # each message went to its shard's connection only
        assert fake_discord.shards_of(str(item.message_id)) == [(1 if item.chat_id == CHANNEL_Y else 0, SHARDS)]
    # Worker 1 received only guild Y's messages, so the four answers it sent are theirs.
    assert await _counts(cluster, "concord_messages_received_total") == [8, 4]
    assert await _counts(cluster, "concord_messages_sent_total") == [8, 4]

    # Worker 1 SIGKILLed: its shard's connection is gone, and Discord has nowhere to send guild Y's messages.
    process = cluster.workers[1].process
    assert process is not None
    cluster.kill(1)
    await process.wait()
    await _until(lambda: all(c.shard != (1, SHARDS) for c in fake_discord.open_connections()), within_s=10)
    unanswered = [await _say(fake_discord, CHANNEL_Y, f"y while down {n}") for n in range(2)]
    still = await _say(fake_discord, CHANNEL_ID, "x while y is down")
    sent.append(still)
    await _until(lambda: _answers(fake_discord, [still]) == 1)
    await asyncio.sleep(2.0)
    assert _answers(fake_discord, unanswered) == 0
    assert [fake_discord.shards_of(str(item.message_id)) for item in unanswered] == [[], []]

    # Restarted, worker 1 identifies as shard 1 again and answers new messages in guild Y. Those sent while it
    # was down stay unanswered: Discord replays missed events only to a resumed session, never to a new one.
    started = time.monotonic()
    await cluster.spawn(cluster.workers[1])
    print(f"worker 1 ready again {time.monotonic() - started:.1f} s after its restart")  # for the README, with -s
    assert sorted(c.shard for c in fake_discord.open_connections() if c.identify is not None) == [(0, 2), (1, 2)]
    after = [await _say(fake_discord, CHANNEL_Y, f"y after restart {n}") for n in range(2)]
    sent.extend(after)
    await _until(lambda: _answers(fake_discord, after) == 2)
    await asyncio.sleep(1.0)
    assert await check_exactly_once(sent, fake_discord.sent_messages, database_url, platform="discord",
                                    reply_of=_discord_reply) == []
    assert _answers(fake_discord, unanswered) == 0
    assert await _counts(cluster, "concord_messages_sent_total") == [9, 2]  # worker 1's counters restarted
