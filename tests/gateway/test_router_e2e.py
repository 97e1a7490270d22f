"""The router end to end over a scripted adapter and the fake LLM server: addressing, queueing, commands."""

from __future__ import annotations

import asyncio

from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, answer_by_kind


async def test_dm_is_answered_and_persisted(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("hello Ann")
    await adapter.say("hi there")
    assert adapter.texts() == ["hello Ann"]
    assert adapter.sent[0][2] is not None  # answered as a reply to the message
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None
    active = await gateway.rt.store.messages.load_active(record.id)
    assert [m["role"] for m in active.messages] == ["user", "assistant"]
    assert active.messages[0]["content"] == "hi there"


async def test_group_answers_only_when_addressed_and_keeps_bounded_tagged_context(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    _gateway, adapter = await gateway_factory(gateway={"group_history": "addressed", "group_context_limit": 2})
    group = {"chat_type": "group", "chat_id": "g1"}
    await adapter.say("lunch?", user_name="Bob", **group)
    await adapter.say("pizza", user_name="Cy", **group)
    await adapter.say("/weather@otherbot", user_name="Dee", **group)  # not ours: chatter
    await adapter.say("no, sushi", user_name="Bob", **group)
    assert adapter.sent == [] and fake_llm.requests == []
    fake_llm.reply("sushi it is")
    await adapter.say("what did we pick?", user_name="Ann", mentions_bot=True, **group)
    assert adapter.texts() == ["sushi it is"]
    sent_user = fake_llm.requests[-1].messages[-1]["content"]
    assert "[Ann] what did we pick?" in sent_user
    assert "[Bob] no, sushi" in sent_user and "[Dee] /weather@otherbot" in sent_user
    assert "[Bob] lunch?" not in sent_user and "[Cy] pizza" not in sent_user  # only the newest 2 lines
    fake_llm.reply("yes")
    await adapter.say("right?", user_name="Bob", reply_to_bot=True, **group)
    assert adapter.texts()[-1] == "yes"
    assert "[Earlier messages" not in fake_llm.requests[-1].messages[-1]["content"]  # context used once


async def test_threads_and_groups_are_separate_sessions(gateway_factory: GatewayFactory,
                                                        fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    await adapter.say("in channel", chat_type="group", chat_id="g1", mentions_bot=True)
    await adapter.say("in thread", chat_type="thread", chat_id="g1", thread_id="t1", mentions_bot=True)
    channel = await gateway.rt.store.sessions.get_active("discord", "group:g1")
    thread = await gateway.rt.store.sessions.get_active("discord", "thread:g1:t1")
    assert channel and thread and channel.id != thread.id
    assert fake_llm.requests[-1].messages[-1]["content"].endswith("in thread")
    assert len(fake_llm.requests[-1].messages) == 2  # system + this thread's only message


async def test_busy_session_queues_in_order_never_drops_or_answers_twice(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    order: list[str] = []

    def respond(body: dict) -> object:
        last = body["messages"][-1]["content"]
        order.append(last)
        from tests.fakes.llm_server import Reply
        return Reply(f"re: {last}", delay=0.05)

    fake_llm.responder = respond
    messages = [f"m{i}" for i in range(6)]
    await asyncio.gather(*(adapter.say(m) for m in messages), adapter.say("other", chat_id="c2"))
    assert order.index("other") < order.index("m5")  # another session ran meanwhile
    assert [o for o in order if o != "other"] == messages
    assert adapter.texts("c1") == [f"re: {m}" for m in messages]
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    active = await gateway.rt.store.messages.load_active(record.id)
    assert [m["content"] for m in active.messages if m["role"] == "user"] == messages
    # A platform redelivering the same message id does not get a second answer.
    again = adapter.inbound("m-dup")
    await adapter._handler(again)
    await adapter._handler(again)
    assert adapter.texts("c1").count("re: m-dup") == 1


async def _long_session(adapter, fake_llm: FakeLLMServer, turns: int = 30) -> None:
    for i in range(turns):
        fake_llm.reply(f"answer {i} " + "detail " * 40)
        await adapter.say(f"question {i} " + "context " * 40)


async def test_compress_is_admin_only_and_reports_before_after(gateway_factory: GatewayFactory,
                                                               fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000})
    await _long_session(adapter, fake_llm)
    calls = len(fake_llm.requests)
    await adapter.say("/compress")  # u1 is not an admin
    assert adapter.texts()[-1] == "Sorry, /compress is for admins only."
    assert len(fake_llm.requests) == calls
    kinds = answer_by_kind(fake_llm)
    await adapter.say("/compress the database", user_id="boss", chat_id="c-boss")
    # boss's DM is its own session: it has nothing to compress, answered without an LLM call.
    assert adapter.texts()[-1] == "Nothing to compress: this conversation has no messages yet." and kinds == []
    await adapter.say("/compress deployment", admin_hint=True)
    reply = adapter.texts()[-1]
    assert reply.startswith("Compressed: 60 → ") and "tokens (" in reply and "saved)" in reply
    assert kinds == ["summary"]
    assert "deployment" in str(fake_llm.requests[-1].json["messages"])  # the focus topic reached the prompt
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    exported = await gateway.rt.store.messages.export(record.id, include_archived=True)
    assert sum(1 for m in exported if not m.active) == 60  # originals archived, not lost
    assert all(SUMMARY_MARKER not in text for text in adapter.texts())
    status = await _status(adapter)
    assert "Compressions: 1" in status and "(manual /compress, saved " in status


async def _status(adapter) -> str:
    await adapter.say("/status")
    return adapter.texts()[-1]


async def test_status_figures(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    _gateway, adapter = await gateway_factory()
    fake_llm.reply("fine", usage={"prompt_tokens": 12_345, "completion_tokens": 5})
    await adapter.say("how are you")
    status = await _status(adapter)
    assert "Context: 12,345 / 200,000 tokens (6%, last real prompt: " in status
    assert "Messages: 2" in status
    # 50% of the window less the reserved answer (max_tokens unset: 8,192 for a 200K window), R-T4.
    assert "Compression threshold: 95,904 tokens (48%)" in status
    assert "Hygiene threshold: 170,000 tokens (85%) or > 5,000 messages" in status
    assert "Compressions: 0" in status and "Last compaction: never" in status
    assert "Engine: compressor · Model: fake-model" in status


async def test_new_starts_a_fresh_session_and_help_lists_commands(gateway_factory: GatewayFactory,
                                                                  fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    await adapter.say("remember me")
    old = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    await adapter.say("/new")
    assert adapter.texts()[-1].startswith("Started a new session.")
    new = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert new.id != old.id
    assert (await gateway.rt.store.sessions.get(old.id)).end_reason == "new"
    await adapter.say("/new", chat_type="group", chat_id="g9")
    assert adapter.texts()[-1] == "Sorry, /new is for admins only."
    await adapter.say("/help")
    assert "/compress [focus]" in adapter.texts()[-1] and "(admins only)" in adapter.texts()[-1]
    await adapter.say("/frobnicate")
    assert adapter.texts()[-1] == "Unknown command /frobnicate. Try /help."
    # Anyone can learn the id an operator puts in gateway.admins, in a group too.
    await adapter.say("/whoami", chat_type="group", chat_id="g9", user_id="234567890123456789")
    assert adapter.texts()[-1].startswith("You are discord:234567890123456789. ")
    assert "CONCORD_GATEWAY__ADMINS=discord:234567890123456789" in adapter.texts()[-1]


async def test_a_turns_stored_messages_get_their_facts_after_the_answer_is_sent(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch) -> None:
    from agent.compression import evidence
    from agent.compression.compressor import ContextCompressor

    _gateway, adapter = await gateway_factory()
    handed: list[tuple[int, list[str]]] = []
    original = ContextCompressor.on_messages_stored

    def spy(self: ContextCompressor, messages) -> list[str | None]:
        handed.append((len(adapter.sent), [m["content"] for m in messages]))
        return original(self, messages)

    monkeypatch.setattr(ContextCompressor, "on_messages_stored", spy)
    evidence.clear_fact_cache()
    fake_llm.reply("done: edited src/app/main.py")
    await adapter.say("Never deploy on Fridays. Fix src/app/main.py please.")
    # Handed over once, after the answer went out, with exactly what the turn stored.
    assert handed == [(1, ["Never deploy on Fridays. Fix src/app/main.py please.", "done: edited src/app/main.py"])]

    def no_scan(*args: object) -> object:
        raise AssertionError("a stored message was scanned again")

    monkeypatch.setattr(evidence, "_text_facts", no_scan)
    said = {"role": "user", "content": "Never deploy on Fridays. Fix src/app/main.py please."}
    assert {(f.kind, f.text) for f in evidence.facts_of_message(said, 1)} >= {
        ("constraint", "Never deploy on Fridays."), ("path", "src/app/main.py")}
