"""/stop received by another worker than the one running the turn: two gateways on one Redis, each
with its own store and platform connection. The turn runs on A; /stop reaches B. In ``interrupt`` busy mode the
sender's next message reaching B interrupts the turn on A the same way (those two workers share the store, as
workers behind one load balancer do)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.conversation.answers import INTERRUPTED_BY_NEW_TEXT, STOPPED_TEXT
from gateway.conversation.commands import NOT_YOURS, NOTHING_TO_STOP
from gateway.intake.busy import RunningTurn, StopOutcome
from gateway.intake.locks import fail_fast_client
from gateway.intake.stops import ANSWER_WAIT_S, RedisStops
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter, make_settings


async def _until(condition: object, within_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not met"
        await asyncio.sleep(0.02)


@pytest.fixture
async def pair(fake_llm: FakeLLMServer, redis_url: str, tmp_path: Path
               ) -> AsyncIterator[tuple[str, list[ScriptedAdapter]]]:
    prefix = f"concord-test:{uuid.uuid4().hex}:"
    gateways, adapters = [], []
    for name in ("a", "b"):
        settings = make_settings(fake_llm, tmp_path / name, redis={"url": redis_url, "key_prefix": prefix},
                                 gateway={"worker_id": f"worker-{name}", "sweep_cron": None,
                                          "admins": ["discord:boss"]})
        gateway = Gateway(await build_runtime(settings), [adapter := ScriptedAdapter()])
        await gateway.start()
        gateways.append(gateway)
        adapters.append(adapter)
    try:
        yield prefix, adapters
    finally:
        for gateway in gateways:
            await gateway.aclose(grace_seconds=5)


async def test_a_stop_sent_to_another_worker_stops_the_turn(pair: tuple[str, list[ScriptedAdapter]],
                                                           fake_llm: FakeLLMServer, redis_url: str) -> None:
    prefix, (a, b) = pair
    fake_llm.reply("too slow to wait for", delay=30)
    turn = asyncio.create_task(a.say("write me an epic", chat_type="group", chat_id="g", user_id="u1",
                                     user_name="Ann", mentions_bot=True))
    await _until(lambda: len(fake_llm.requests) == 1)
    await asyncio.sleep(0.3)  # announced
    await b.say("/stop", chat_type="group", chat_id="g", user_id="u2", user_name="Bob")
    assert b.texts() == [NOT_YOURS.format(name="Ann")]  # decided on A, told by B
    assert not turn.done()
    started = asyncio.get_running_loop().time()
    await b.say("/stop", chat_type="group", chat_id="g", user_id="u1", user_name="Ann")
    await asyncio.wait_for(turn, 2)
    assert asyncio.get_running_loop().time() - started < 2
    assert a.texts() == [STOPPED_TEXT] and b.texts() == [NOT_YOURS.format(name="Ann")]  # said once, by the turn
    quick = asyncio.get_running_loop().time()
    await b.say("/stop", chat_type="group", chat_id="g", user_id="u1", user_name="Ann")
    assert b.texts()[-1] == NOTHING_TO_STOP
    assert asyncio.get_running_loop().time() - quick < ANSWER_WAIT_S  # nothing announced: no wait
    client = Redis.from_url(redis_url)
    try:
        assert await client.keys(f"{prefix}stop:turn:*") == []  # the entry went with the turn
    finally:
        await client.aclose()


async def test_an_admin_on_another_worker_may_stop_any_answer(pair: tuple[str, list[ScriptedAdapter]],
                                                              fake_llm: FakeLLMServer) -> None:
    _, (a, b) = pair
    fake_llm.reply("slow", delay=30)
    turn = asyncio.create_task(a.say("question", chat_id="d1", user_id="u1"))
    await _until(lambda: len(fake_llm.requests) == 1)
    await asyncio.sleep(0.3)
    await b.say("/stop", chat_id="d1", user_id="boss")
    await asyncio.wait_for(turn, 2)
    assert a.texts() == [STOPPED_TEXT] and b.texts() == []


async def interrupting_pair(gateway_factory: GatewayFactory, redis_url: str) -> tuple[ScriptedAdapter, ScriptedAdapter]:
    """Two workers in ``interrupt`` busy mode sharing the store and Redis."""
    shared = {"url": redis_url, "key_prefix": f"concord-test:{uuid.uuid4().hex}:"}
    _, a = await gateway_factory(redis=shared, gateway={"busy_mode": "interrupt"})
    _, b = await gateway_factory(redis=shared, gateway={"busy_mode": "interrupt"})
    return a, b


async def test_a_newer_message_on_another_worker_interrupts_its_senders_answer(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, redis_url: str) -> None:
    a, b = await interrupting_pair(gateway_factory, redis_url)
    fake_llm.reply("never finished", delay=30)
    fake_llm.reply("answer to the correction")
    turn = asyncio.create_task(a.say("summarise the logs", chat_id="d1", user_id="u1"))
    await _until(lambda: len(fake_llm.requests) == 1)
    await asyncio.sleep(0.3)  # announced
    await asyncio.wait_for(b.say("actually, only the errors", chat_id="d1", user_id="u1"), 5)
    await asyncio.wait_for(turn, 2)
    await _until(lambda: b.texts())
    assert a.texts() == [INTERRUPTED_BY_NEW_TEXT] and b.texts() == ["answer to the correction"]
    users = [m["content"] for m in fake_llm.requests[-1].messages if m["role"] == "user"]
    assert users == ["summarise the logs", "actually, only the errors"]


async def test_another_senders_message_on_another_worker_interrupts_nothing(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, redis_url: str) -> None:
    a, b = await interrupting_pair(gateway_factory, redis_url)
    fake_llm.reply("the slow answer", delay=1.5)
    fake_llm.reply("the second answer")
    turn = asyncio.create_task(a.say("summarise the logs", chat_type="group", chat_id="g", user_id="u1",
                                     user_name="Ann", mentions_bot=True))
    await _until(lambda: len(fake_llm.requests) == 1)
    await asyncio.sleep(0.3)
    await asyncio.wait_for(b.say("and the warnings?", chat_type="group", chat_id="g", user_id="u2",
                                 user_name="Bob", mentions_bot=True), 10)
    await asyncio.wait_for(turn, 5)
    await _until(lambda: b.texts())
    assert a.texts() == ["the slow answer"] and b.texts() == ["the second answer"]


async def test_a_request_the_turn_never_saw_is_answered_once_by_the_asker(redis_url: str) -> None:
    """The turn ended between the request and its worker's next look: the asker waits, then says nothing runs;
    a request left behind is not taken by the next turn after the window."""
    prefix = f"concord-test:{uuid.uuid4().hex}:stop:"
    client = fail_fast_client(redis_url)
    stops = RedisStops(client, prefix=prefix, worker="w")
    try:
        await client.set(f"{prefix}turn:discord:dm:1", "w dead-turn", px=5_000)  # announced, never watched
        started = asyncio.get_running_loop().time()
        assert await stops.forward("discord:dm:1", "u1", False) == (StopOutcome.NOTHING, "")
        assert asyncio.get_running_loop().time() - started >= ANSWER_WAIT_S
        await client.delete(f"{prefix}turn:discord:dm:1")
        turn = RunningTurn("u1", "Ann")
        async with stops.watching("discord:dm:1", turn):
            await asyncio.sleep(0.5)
        assert turn.stopped is None  # the stale request was out of its window
    finally:
        await client.aclose()


async def test_a_dead_redis_says_the_stop_could_not_be_carried(caplog: pytest.LogCaptureFixture) -> None:
    client = fail_fast_client("redis://127.0.0.1:9/0")  # nothing listens on port 9
    stops = RedisStops(client, prefix="concord-test:stop:")
    try:
        assert await stops.forward("discord:dm:1", "u1", False) == (StopOutcome.UNREACHABLE, "")
        turn = RunningTurn("u1", "Ann")
        async with stops.watching("discord:dm:1", turn):  # the turn runs on regardless
            await asyncio.sleep(0.3)
        assert turn.request_stop("u1", False) is StopOutcome.STOPPED  # and a local /stop still works
    finally:
        await client.aclose()
    assert "redis unavailable" in caplog.text
