"""search_history (docs/rules.md §8, lossless recall): the model looks up exact values a compaction took out of view."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import update

from agent.compression.summary import SUMMARY_PREFIX
from gateway.app import Gateway
from gateway.conversation.history import READ_TOOL
from gateway.conversation.recall import MAX_ANCESTORS, RECALL_TOOL, conversation_sessions
from gateway.store.database import write
from gateway.store.models import SessionRow
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter, answer_by_kind, bulk_session, chatter

FACT = "the staging DB port is 54329"
OTHER_FACT = "the staging DB port is 11111"
SECRET = "sk-proj-" + "Q7w8E9r0" * 5
# A small window, so /compress has a middle to summarise beyond the protected tail.
SMALL = {"context_length": 8_000}
LINE = re.compile(r"^\[#\d+ (user|assistant), \d{4}-\d\d-\d\d \d\d:\d\d, (archived|earlier session), "
                  r"(all words|any word|exact text|any word, by meaning)\] ")


def conversation(fact: str) -> list[dict[str, Any]]:
    """40 messages with ``fact`` (and a secret) early enough to be compacted away by /compress."""
    messages = chatter(40, words=80)
    messages[5] = {"role": "assistant", "content": f"Noted: {fact}. The deploy key is {SECRET} for staging."}
    return messages


async def compacted_chat(gateway: Gateway, adapter: ScriptedAdapter, fake_llm: FakeLLMServer,
                         chat_id: str, fact: str) -> str:
    """A chat holding ``fact``, compacted by an admin's /compress; returns its session id before compaction."""
    session_id = await bulk_session(gateway, f"dm:{chat_id}", conversation(fact))
    answer_by_kind(fake_llm)
    await adapter.say("/compress", chat_id=chat_id, admin_hint=True)
    assert adapter.texts(chat_id)[-1].startswith("Compressed: 40 → ")
    return session_id


async def call_tool(adapter: ScriptedAdapter, fake_llm: FakeLLMServer, arguments: dict[str, Any] | str,
                    chat_id: str = "c1") -> str:
    """One turn in which the model calls search_history; the tool result the model got back."""
    call_id = f"call_{len(fake_llm.requests)}"
    fake_llm.reply("", tool_calls=[{"id": call_id, "name": "search_history", "arguments": arguments}])
    fake_llm.reply("done")
    await adapter.say("what was that value again?", chat_id=chat_id)
    assert adapter.texts(chat_id)[-1] == "done"
    [result] = [m for m in fake_llm.requests[-1].messages if m.get("tool_call_id") == call_id]
    return str(result["content"])


async def test_finds_the_exact_value_in_archived_rows(gateway_factory: GatewayFactory,
                                                      fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    session_id = await compacted_chat(gateway, adapter, fake_llm, "c1", FACT)
    await compacted_chat(gateway, adapter, fake_llm, "c2", OTHER_FACT)
    result = await call_tool(adapter, fake_llm, {"query": "staging DB port"})
    asked = fake_llm.requests[-2]
    # The value is gone from what the model sees, and comes back only through the tool.
    assert "54329" not in json.dumps(asked.messages)
    assert "search_history" in [t["function"]["name"] for t in asked.json["tools"]]
    # How to look them up travels in the summary message; the system prompt is the one of an uncompacted chat.
    [summary] = [m for m in asked.messages if str(m.get("content")).startswith(SUMMARY_PREFIX)]
    hint = summary["content"].split("\n\n")[1]
    assert hint.startswith("Messages #4–#") and "instead of guessing" in hint  # after the 3 protected ones
    assert f"with {RECALL_TOOL}" in hint and f"with {READ_TOOL}" in hint
    assert "compacted" not in asked.messages[0]["content"]
    header, *lines = result.splitlines()
    assert header == "1 earlier message(s) match 'staging DB port', most relevant first (times UTC):"
    assert len(lines) == 1 and LINE.match(lines[0]) and "54329" in lines[0]
    assert lines[0].startswith("[#6 assistant, ") and ", archived, all words] " in lines[0]
    assert "11111" not in result  # the other chat's archive is never searched
    assert (await gateway.rt.store.sessions.get_active("discord", "dm:c1")).id == session_id


async def test_secrets_in_archived_rows_come_back_redacted(gateway_factory: GatewayFactory,
                                                           fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    await compacted_chat(gateway, adapter, fake_llm, "c1", FACT)
    for query in ("deploy key", "sk-proj"):
        result = await call_tool(adapter, fake_llm, {"query": query})
        assert "[REDACTED]" in result and "Q7w8E9r0" not in result


async def test_rotated_sessions_find_the_parents_rows(gateway_factory: GatewayFactory,
                                                      fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL, compression={"in_place": False})
    parent_id = await compacted_chat(gateway, adapter, fake_llm, "c1", FACT)
    child = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert child.parent_session_id == parent_id
    result = await call_tool(adapter, fake_llm, {"query": "54329", "limit": 3})
    lines = result.splitlines()[1:]
    assert len(lines) == 1 and "[#6 assistant, " in lines[0] and ", earlier session, all words] " in lines[0]
    # The parent's rows that rotation copied into the child (its verbatim tail) are not repeated.
    many = (await call_tool(adapter, fake_llm, {"query": "m1", "limit": 20})).splitlines()[1:]
    assert len(many) > 4 and all(", earlier session, all words] " in line for line in many)
    assert_only_unseen(many, fake_llm)


async def test_no_match_limit_and_bad_queries_are_tool_texts(gateway_factory: GatewayFactory,
                                                             fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    await compacted_chat(gateway, adapter, fake_llm, "c1", FACT)
    assert await call_tool(adapter, fake_llm, {"query": "zebra crossing"}) == \
        "No earlier messages match 'zebra crossing'."
    assert await call_tool(adapter, fake_llm, {"query": "   "}) == \
        "Error: the query is empty. Give a few words or an exact fragment to look for."
    assert (await call_tool(adapter, fake_llm, {"query": ""})).startswith(
        "Error: invalid arguments for 'search_history'")
    assert "must be <= 20" in await call_tool(adapter, fake_llm, {"query": "m1", "limit": 50})
    # "m1" prefix-matches m1, m10…m19: the compacted ones come back, never those still in view.
    many = await call_tool(adapter, fake_llm, {"query": "m1", "limit": 4})
    lines = many.splitlines()[1:]
    assert len(lines) == 4 and all(LINE.match(line) and ", archived, all words] " in line for line in lines)
    assert_only_unseen(lines, fake_llm)


def assert_only_unseen(lines: list[str], fake_llm: FakeLLMServer) -> None:
    """Each hit (a chatter message ``m<i> …``) is one the model does not see: compacted, not the kept tail."""
    seen = json.dumps(fake_llm.requests[-2].messages)
    numbers = [re.search(r"\] (m1\d*) ", line) for line in lines]
    assert all(numbers) and not [m.group(1) for m in numbers if m and f'"{m.group(1)} ' in seen]


async def test_ancestor_walk_is_bounded_and_stays_in_the_chat(gateway_factory: GatewayFactory) -> None:
    gateway, _ = await gateway_factory()
    store = gateway.rt.store
    first = await bulk_session(gateway, "dm:chain", chatter(2))
    ids = [first]
    for _ in range(MAX_ANCESTORS + 2):
        child = await store.compactions.rotate(ids[-1], [{"role": "user", "content": "x"}], [1])
        ids.append(child.id)
    chain = await conversation_sessions(store, ids[-1])
    assert chain == ids[::-1][: MAX_ANCESTORS + 1]
    assert await conversation_sessions(store, "no-such-session") == []
    # A parent link into another chat (a corrupt row) ends the walk instead of leaking that chat.
    stranger = await bulk_session(gateway, "dm:stranger", chatter(2))
    async with write(store.engine) as conn:
        await conn.execute(update(SessionRow).where(SessionRow.id == ids[1]).values(parent_session_id=stranger))
    assert await conversation_sessions(store, ids[3]) == [ids[3], ids[2], ids[1]]
    # A cycle ends the walk too.
    async with write(store.engine) as conn:
        await conn.execute(update(SessionRow).where(SessionRow.id == ids[1]).values(parent_session_id=ids[2]))
    assert await conversation_sessions(store, ids[2]) == [ids[2], ids[1]]
