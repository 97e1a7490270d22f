"""A retry never stores or runs anything twice (items 2 and 3), in one process: a COMMIT that went
through while the connection carrying its answer was lost (the turn's, a command reply's, a command's start),
and an earlier attempt that died after a compaction stored the request, or in the middle of a command.

The same windows with real processes (a proxy cutting PostgreSQL's connection after COMMIT, SIGKILL at the
named crash points) are in tests/scale/test_loss_windows.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import OperationalError

from gateway.conversation.commands import INTERRUPTED_COMMAND
from gateway.intake.inbox import inbound_key
from gateway.store import Progress
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind


def _commit_then_lose(target: Any, name: str, when: Callable[..., bool] = lambda *a, **k: True) -> list[int]:
    """Make the first call of ``target.name`` that ``when`` accepts commit, then fail as a connection lost inside
    COMMIT does through SQLAlchemy and asyncpg; the list fills once it did."""
    real, lost = getattr(target, name), []

    async def commit_then_lose(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        if not lost and when(*args, **kwargs):
            lost.append(1)
            raise OperationalError("COMMIT", {}, ConnectionResetError(104, "Connection reset by peer"),
                                   connection_invalidated=True)
        return result

    setattr(target, name, commit_then_lose)
    return lost


async def _user_rows(gateway: Any, chat_key: str = "dm:c1") -> list[str]:
    record = await gateway.rt.store.sessions.get_active("discord", chat_key)
    rows = await gateway.rt.store.messages.export(record.id, include_archived=True)
    return [str(r.message["content"]) for r in rows if r.role == "user"]


async def test_a_turn_whose_commit_answer_was_lost_is_stored_and_answered_once(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    kinds = answer_by_kind(fake_llm, "the answer")
    lost = _commit_then_lose(gateway.rt.store.messages, "append", lambda *a, **k: k.get("handled") is not None)
    await adapter.say("one question")
    assert lost and kinds == ["chat"]
    assert adapter.texts() == ["the answer"]
    assert await _user_rows(gateway) == ["one question"]
    assert await gateway.rt.store.deliveries.counts() == {"sent": 1}  # the row the unseen COMMIT stored


async def test_a_command_reply_whose_commit_answer_was_lost_is_stored_and_sent_once(
        gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory()
    lost = _commit_then_lose(gateway.rt.store.inbox, "mark_handled")
    await adapter.say("/pin answer in French")
    assert lost and adapter.texts() == ["Pinned #1 (3 tokens): answer in French"]
    assert [p.text for p in await gateway.rt.store.pins.list("discord", "dm:c1")] == ["answer in French"]
    assert await gateway.rt.store.deliveries.counts() == {"sent": 1}


async def test_a_command_whose_start_commit_answer_was_lost_still_runs_once(gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory()
    lost = _commit_then_lose(gateway.rt.store.inbox, "advance")
    await adapter.say("/pin answer in French")
    assert lost and adapter.texts() == ["Pinned #1 (3 tokens): answer in French"]
    assert len(await gateway.rt.store.pins.list("discord", "dm:c1")) == 1


async def test_a_command_an_earlier_attempt_started_is_not_run_again(gateway_factory: GatewayFactory) -> None:
    # A worker died in the middle of /pin: it may or may not have taken effect, so the retry says so.
    gateway, adapter = await gateway_factory()
    inbound = adapter.inbound("/pin answer in French")
    await gateway.rt.store.inbox.advance(Progress(inbound_key(inbound), "discord", "discord:dm:c1", 0, 1))
    assert adapter._handler is not None
    await adapter._handler(inbound)
    assert adapter.texts() == [INTERRUPTED_COMMAND.format(name="pin")]
    assert await gateway.rt.store.pins.list("discord", "dm:c1") == []


async def test_a_turn_whose_request_an_earlier_attempt_stored_resumes_from_it(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    # A worker died after a compaction inside the turn stored the request: the retry answers it without
    # storing (or sending the model) the request a second time.
    gateway, adapter = await gateway_factory()
    answer_by_kind(fake_llm, "resumed answer")
    inbound = adapter.inbound("the long question")
    record = await gateway.rt.store.sessions.get_or_create_active("discord", "dm:c1")
    await gateway.rt.store.messages.append(record.id, [{"role": "user", "content": "the long question"}], [5],
                                           progress=Progress(inbound_key(inbound), "discord", "discord:dm:c1", 0, 1))
    assert adapter._handler is not None
    await adapter._handler(inbound)
    assert adapter.texts() == ["resumed answer"]
    assert await _user_rows(gateway) == ["the long question"]
    sent = [m["content"] for m in fake_llm.requests[-1].messages if m["role"] == "user"]
    assert sent == ["the long question"]
