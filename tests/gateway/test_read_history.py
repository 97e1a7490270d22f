"""read_history: one stored message of this conversation whole by number — paged, with neighbours, redacted,
and never another chat's (group vs DM, two users' DMs), end to end through the gateway and the fake LLM."""

from __future__ import annotations

from collections import deque
from typing import Any

from gateway.app import Gateway
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import (
    SUMMARY_MARKER,
    GatewayFactory,
    ScriptedAdapter,
    answer_by_kind,
    bulk_session,
    chatter,
    is_summary_request,
)

SMALL = {"context_length": 8_000}
SECRET = "sk-proj-" + "Q7w8E9r0" * 5
LONG = "".join(f"line {i:04d} of the build log\n" for i in range(400))  # ~10,000 characters


def conversation(fact: str) -> list[dict[str, Any]]:
    messages = chatter(40, words=80)
    messages[5] = {"role": "assistant", "content": f"Noted: {fact}. The deploy key is {SECRET}."}
    messages[7] = {"role": "assistant", "content": LONG}
    return messages


def where(chat: str) -> dict[str, Any]:
    """Inbound options for a chat: ``g…`` ids are group channels (the bot is mentioned), others DMs."""
    if chat.startswith("g"):
        return {"chat_id": chat, "chat_type": "group", "mentions_bot": True}
    return {"chat_id": chat, "user_id": chat}


async def compacted(gateway: Gateway, adapter: ScriptedAdapter, fake_llm: FakeLLMServer, chat: str,
                    fact: str) -> None:
    prefix = "group" if chat.startswith("g") else "dm"
    await bulk_session(gateway, f"{prefix}:{chat}", conversation(fact))
    answer_by_kind(fake_llm)
    options = where(chat)
    options.pop("mentions_bot", None)
    await adapter.say("/compress", admin_hint=True, **options)
    assert adapter.texts(chat)[-1].startswith("Compressed: 40 → ")


def chat_script(fake_llm: FakeLLMServer, *replies: Reply) -> None:
    """Chat requests get ``replies`` in order (then "done"); summary calls get a summary, whenever they come."""
    queue = deque(replies)

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(f"## Goal\n{SUMMARY_MARKER}")
        return queue.popleft() if queue else Reply("done")

    fake_llm.responder = respond


async def read(adapter: ScriptedAdapter, fake_llm: FakeLLMServer, chat: str, **arguments: Any) -> str:
    """One turn in which the model calls read_history; the tool result it got back."""
    call_id = f"call_{len(fake_llm.requests)}"
    chat_script(fake_llm, Reply("", [{"id": call_id, "name": "read_history", "arguments": arguments}]))
    await adapter.say("show me that message", **where(chat))
    assert adapter.texts(chat)[-1] == "done"
    [result] = [m for m in fake_llm.requests[-1].messages if m.get("tool_call_id") == call_id]
    return str(result["content"])


async def test_reads_only_this_chats_message_by_number(gateway_factory: GatewayFactory,
                                                       fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    facts = {"u1": "Ann's locker code is 1111", "u2": "Bo's locker code is 2222", "g1": "the room code is 3333"}
    for chat, fact in facts.items():
        await compacted(gateway, adapter, fake_llm, chat, fact)
    for chat, fact in facts.items():
        text = await read(adapter, fake_llm, chat, number=6)
        assert text.startswith("#6 assistant, ") and ", archived — " in text
        assert fact in text
        assert not [other for other in facts.values() if other != fact and other in text]
        assert SECRET not in text and "[REDACTED]" in text
    # A number that only exists elsewhere (no chat has #5000) or nowhere is a clear tool text, not a leak.
    assert (await read(adapter, fake_llm, "u1", number=5000)).startswith("No message #5000 in this conversation.")


async def test_long_messages_come_in_pages_and_neighbours_on_request(gateway_factory: GatewayFactory,
                                                                     fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    await compacted(gateway, adapter, fake_llm, "u1", "the port is 5432")
    first = await read(adapter, fake_llm, "u1", number=8)
    header, body = first.split("\n", 1)
    assert header.startswith("#8 assistant, ") and header.endswith(f"— {len(LONG):,} characters")
    assert body.startswith("line 0000 of the build log")
    page, note = body.rsplit("\n", 1)
    assert len(page) == 4_000
    rest = len(LONG) - 4_000
    assert note == f"[… {rest:,} more characters: call read_history with number=8 offset=4000]"
    # A page small enough that the small window's clipping of oversized messages leaves it whole.
    second = await read(adapter, fake_llm, "u1", number=8, offset=4_000, max_chars=1_000)
    page, note = second.split("\n", 1)[1].rsplit("\n", 1)
    assert page == LONG[4_000:5_000]
    assert note == f"[… {len(LONG) - 5_000:,} more characters: call read_history with number=8 offset=5000]"
    around = await read(adapter, fake_llm, "u1", number=6, before=1, after=1, max_chars=500)
    assert [line.split(" ")[0] for line in around.splitlines() if line.startswith("#")] == ["#5", "#6", "#7"]
    assert "the port is 5432" in around
    assert (await read(adapter, fake_llm, "u1", number=6, offset=10_000)).endswith(
        "Nothing at offset 10,000: the message is shorter.")


async def test_after_rotation_the_parents_numbers_still_open(gateway_factory: GatewayFactory,
                                                             fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL, compression={"in_place": False})
    await compacted(gateway, adapter, fake_llm, "u1", "the port is 5432")
    child = await gateway.rt.store.sessions.get_active("discord", "dm:u1")
    assert child.parent_session_id is not None
    text = await read(adapter, fake_llm, "u1", number=6)
    assert text.startswith("#6 assistant, ") and "the port is 5432" in text
    # The child numbers on from its parent, so its own rows never reuse the parent's numbers.
    rows = await gateway.rt.store.messages.export(child.id)
    assert min(r.seq for r in rows) > 41
