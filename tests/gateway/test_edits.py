"""Edits through the router: before the answer the turn runs on the new text; after it the edit is a
correction the next turn carries, stored beside the original; an edit never runs a command."""

from __future__ import annotations

import asyncio
import dataclasses

from adapters.base import Inbound
from gateway.app import Gateway
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter


def edited(message: Inbound, text: str, edit: int = 1, **changes: object) -> Inbound:
    """The platform's edit event of ``message``, now reading ``text``."""
    return dataclasses.replace(message, text=text, kind="edit", edit_id=str(edit), **changes)  # type: ignore[arg-type]


async def stored_contents(gateway: Gateway, chat_key: str) -> list[str]:
    """The contents of the chat's active messages, in order."""
    store = gateway.rt.store
    record = await store.sessions.get_active("discord", chat_key)
    assert record is not None
    return [str(m["content"]) for m in (await store.messages.load_active(record.id)).messages]


async def test_an_edit_before_the_answer_replaces_the_text_the_model_sees(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("first answer", delay=0.6)  # the first turn is still running when the typo is fixed
    fake_llm.reply("second answer")
    first = adapter.inbound("what is 2+2?")
    second = adapter.inbound("and 3+3 plz thx")
    adapter._dispatch(first)
    await asyncio.sleep(0.2)
    adapter._dispatch(second)
    await asyncio.sleep(0.05)
    adapter._dispatch(edited(second, "and 3+3?"))
    await adapter._drain(10)
    assert adapter.texts() == ["first answer", "second answer"]  # the edit got no answer of its own
    assert fake_llm.requests[1].messages[-1]["content"] == "and 3+3?"
    assert "plz" not in str([r.json for r in fake_llm.requests])
    assert (await stored_contents(gateway, "dm:c1"))[2] == "and 3+3?"


async def test_an_edit_after_the_answer_is_a_correction_for_the_next_turn(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    original = adapter.inbound("book a table for 4")
    await adapter._handler(original)  # type: ignore[misc]
    fake_llm.reply("Noted: a table for 5.")
    await adapter._handler(edited(original, "book a table for 5"))  # type: ignore[misc]
    assert adapter.texts() == ["ok", "Noted: a table for 5."]
    assert fake_llm.requests[-1].messages[-1]["content"] == "Ann edited their message #1: book a table for 5"
    # Both versions stay in the history, the first where it was.
    assert await stored_contents(gateway, "dm:c1") == [
        "book a table for 4", "ok", "Ann edited their message #1: book a table for 5", "Noted: a table for 5."]


async def test_in_a_group_a_correction_is_stored_and_answered_only_when_it_addresses_the_bot(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    group = {"chat_type": "group", "chat_id": "g1", "user_name": "Bob"}
    chatter = adapter.inbound("meet at 6", **group)
    await adapter._handler(chatter)  # type: ignore[misc]
    await adapter._handler(edited(chatter, "meet at 7"))  # type: ignore[misc]
    assert adapter.sent == [] and fake_llm.requests == []
    await adapter._handler(edited(chatter, "meet at 8, right bot?", 2, mentions_bot=True))  # type: ignore[misc]
    assert adapter.texts() == ["ok"]
    request = fake_llm.requests[-1].messages
    assert request[-1]["content"] == "[Bob] edited their message #1: meet at 8, right bot?"
    assert [m["content"] for m in request[1:-1]] == ["[Bob] meet at 6", "[Bob] edited their message #1: meet at 7"]
    assert len(await stored_contents(gateway, "group:g1")) == 4


async def test_each_edit_is_handled_once_and_never_runs_a_command(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    original = adapter.inbound("hello")
    await adapter._handler(original)  # type: ignore[misc]
    edit = edited(original, "hello again")
    await adapter._handler(edit)  # type: ignore[misc]
    await adapter._handler(edit)  # delivered twice: the same edit id
    assert len(fake_llm.requests) == 2
    await adapter._handler(edited(original, "/new", 2, is_command=True, command="new"))  # type: ignore[misc]
    assert len(fake_llm.requests) == 2 and len(adapter.sent) == 2
    assert (await gateway.rt.store.sessions.get_active("discord", "dm:c1")) is not None
    assert len(await stored_contents(gateway, "dm:c1")) == 4  # no /new ran


async def test_an_edit_of_a_message_never_stored_says_so(gateway_factory: GatewayFactory,
                                                         fake_llm: FakeLLMServer) -> None:
    _gateway, adapter = await gateway_factory()
    unknown = ScriptedAdapter().inbound("from before the bot was here")
    await adapter._handler(edited(unknown, "changed"))  # type: ignore[misc]
    assert fake_llm.requests[-1].messages[-1]["content"] == "Ann edited an earlier message: changed"
