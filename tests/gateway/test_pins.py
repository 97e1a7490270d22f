"""Pinned rules: /pin, /pins, /unpin and the pin tool; word for word in every request, through compactions,
rotations, /new and restarts; never summarized; capped with a clear refusal; counted in /status."""

from __future__ import annotations

from typing import Any

from gateway.conversation.pins import PINS_HEADER
from gateway.conversation.status_commands import status_figures
from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import (
    GatewayFactory,
    answer_by_kind,
    bulk_session,
    chatter,
    is_summary_request,
)

RULE = "Always answer in French, and never suggest force-pushing to main."
SMALL = {"context_length": 8_000}
DM = SessionKey("discord", "dm:c1")


def chat_requests(fake_llm: FakeLLMServer) -> list[Any]:
    return [r for r in fake_llm.requests if not is_summary_request(r.json)]


def system_of(request: Any) -> str:
    return str(request.messages[0]["content"])


async def test_pin_list_unpin_and_status_in_a_dm(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    await adapter.say(f"/pin {RULE}")
    assert adapter.texts()[-1].startswith("Pinned #1 (") and adapter.texts()[-1].endswith(RULE)
    await adapter.say("/pin Use metric units.")
    await adapter.say("/pins")
    listing = adapter.texts()[-1].splitlines()
    assert listing[0].startswith("Pinned rules (2 of 20, ") and listing[1:] == [f"1. {RULE}", "2. Use metric units."]
    fake_llm.reply("bonjour")
    await adapter.say("hello")
    assert system_of(fake_llm.last_request).endswith(f"{PINS_HEADER}\n1. {RULE}\n2. Use metric units.")
    await adapter.say("/status")
    tokens = sum(gateway.rt.counter.count_text(t) for t in (RULE, "Use metric units."))
    assert f"Pins: 2 ({tokens:,} tokens, in every request)" in adapter.texts()[-1]
    await adapter.say("/unpin 1")
    assert adapter.texts()[-1] == f"Unpinned #1: {RULE}"
    await adapter.say("/unpin 7")
    assert adapter.texts()[-1] == "No pin #7 here. /pins lists them."
    await adapter.say("/unpin x")
    assert adapter.texts()[-1].startswith("Usage: /unpin N")
    fake_llm.reply("ok")
    await adapter.say("again")
    assert system_of(fake_llm.last_request).endswith(f"{PINS_HEADER}\n1. Use metric units.")


async def test_pins_count_toward_the_budget(gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory()
    live = await gateway.sessions.open(DM, "u1")
    before = status_figures(gateway.sessions, live).tokens
    await adapter.say(f"/pin {RULE}")
    live = await gateway.sessions.open(DM, "u1")
    assert status_figures(gateway.sessions, live).tokens >= before + gateway.rt.counter.count_text(RULE)


async def test_groups_need_an_admin_and_caps_refuse_clearly(gateway_factory: GatewayFactory) -> None:
    _, adapter = await gateway_factory(gateway={"pins_max_count": 2, "pins_max_tokens": 40})
    group = {"chat_type": "group", "chat_id": "g1"}
    await adapter.say("/pin no spoilers", **group)
    assert adapter.texts("g1")[-1] == "Sorry, /pin is for admins only."
    await adapter.say("/pins", **group)
    assert adapter.texts("g1")[-1] == "No pinned rules. Pin one with /pin TEXT."
    await adapter.say("/pin no spoilers", admin_hint=True, **group)
    assert adapter.texts("g1")[-1].startswith("Pinned #1")
    await adapter.say("/pin " + "very long rule " * 20, admin_hint=True, **group)
    assert adapter.texts("g1")[-1].startswith("Not pinned: pins would take ") and "over the limit of 40" in \
        adapter.texts("g1")[-1]
    await adapter.say("/pin be kind", admin_hint=True, **group)
    await adapter.say("/pin third one", admin_hint=True, **group)
    assert adapter.texts("g1")[-1] == ("Not pinned: this chat already has 2 of 2 pins. Remove one with /unpin N "
                                       "(see /pins) or shorten it.")
    await adapter.say("/unpin 1", **group)
    assert adapter.texts("g1")[-1] == "Sorry, /unpin is for admins only."
    await adapter.say("/pin the key is sk-proj-" + "Q7w8E9r0" * 5)
    assert adapter.texts("c1")[-1].startswith("Not pinned: it looks like it contains a secret")
    await adapter.say("/pin   ")
    assert adapter.texts("c1")[-1].startswith("Usage: /pin TEXT")


async def test_a_pin_survives_ten_compactions_verbatim_and_is_never_summarized(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL)
    await bulk_session(gateway, "dm:c1", chatter(30, words=60))
    await adapter.say(f"/pin {RULE}")
    answer_by_kind(fake_llm)
    for round_ in range(10):
        live = await gateway.sessions.open(DM, "u1")
        extra = chatter(30, words=60)
        await gateway.rt.store.messages.append(live.id, extra, [gateway.rt.counter.count_message(m) for m in extra])
        await adapter.say("/compress", admin_hint=True)
        assert adapter.texts()[-1].startswith("Compressed: "), (round_, adapter.texts()[-1])
        await adapter.say(f"question {round_}")
    live = await gateway.sessions.open(DM, "u1")
    assert live.engine.compression_count == 10
    chats = chat_requests(fake_llm)
    assert len(chats) >= 10
    assert all(system_of(r).endswith(f"{PINS_HEADER}\n1. {RULE}") for r in chats)
    summaries = [r for r in fake_llm.requests if is_summary_request(r.json)]
    assert len(summaries) == 10 and not [r for r in summaries if RULE in str(r.messages)]


async def test_pins_survive_rotation_new_and_restart(gateway_factory: GatewayFactory,
                                                     fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=SMALL, compression={"in_place": False})
    await bulk_session(gateway, "dm:c1", chatter(40, words=60))
    await adapter.say(f"/pin {RULE}")
    answer_by_kind(fake_llm)
    await adapter.say("/compress", admin_hint=True)
    await adapter.say("/new")
    assert adapter.texts()[-1].startswith("Started a new session.") and "removed" not in adapter.texts()[-1]
    await gateway.aclose(grace_seconds=5)

    restarted, adapter2 = await gateway_factory(llm=SMALL, compression={"in_place": False})
    await adapter2.say("after the restart")
    assert system_of(fake_llm.last_request).endswith(f"{PINS_HEADER}\n1. {RULE}")
    await adapter2.say("/new --unpin")
    assert adapter2.texts()[-1].endswith(" 1 pin(s) removed.")
    await adapter2.say("fresh start")
    assert PINS_HEADER not in system_of(fake_llm.last_request)
    assert await restarted.rt.store.pins.list("discord", "dm:c1") == []


async def test_the_model_pins_a_rule_in_a_dm_and_not_in_a_group(gateway_factory: GatewayFactory,
                                                                 fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("", tool_calls=[{"id": "p1", "name": "pin", "arguments": {"text": "Reply in haiku."}}])
    fake_llm.reply("Pinned.")
    await adapter.say("From now on, always reply in haiku.")
    # The rule is in force for the rest of this very turn, and after.
    assert system_of(fake_llm.last_request).endswith(f"{PINS_HEADER}\n1. Reply in haiku.")
    pins = await gateway.rt.store.pins.list("discord", "dm:c1")
    assert [(p.text, p.created_by) for p in pins] == [("Reply in haiku.", "model")]
    fake_llm.reply("ok")
    await adapter.say("hi", chat_type="group", chat_id="g1", mentions_bot=True)
    tools = [t["function"]["name"] for t in fake_llm.last_request.json["tools"]]
    assert "pin" not in tools and "read_history" in tools and "search_history" in tools


async def test_a_pin_made_by_another_worker_is_picked_up(gateway_factory: GatewayFactory,
                                                         fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("one")
    await adapter.say("hi")
    first = system_of(fake_llm.last_request)
    await gateway.rt.store.pins.add("discord", "dm:c1", "Be brief.", 3, max_count=20, max_tokens=2_000)
    fake_llm.reply("two")
    await adapter.say("again")
    assert system_of(fake_llm.last_request) == f"{first}\n\n{PINS_HEADER}\n1. Be brief."
    fake_llm.reply("three")
    await adapter.say("and again")
    assert system_of(fake_llm.requests[-1]) == system_of(fake_llm.requests[-2])  # byte-stable for caching



async def test_a_small_window_keeps_pins_to_a_tenth_of_it(gateway_factory: GatewayFactory,
                                                           fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 4_096})
    rule = "Always answer in French, " + "and keep it short, " * 45
    tokens = gateway.rt.counter.count_text(rule.strip())
    assert 205 < tokens < 409  # one fits a tenth of 4,096 tokens, two do not
    await adapter.say(f"/pin {rule}")
    assert adapter.texts()[-1].startswith("Pinned #1")
    await adapter.say(f"/pin {rule} again")
    assert "over the limit of 409" in adapter.texts()[-1] and "a tenth of the model's 4,096-token window" in \
        adapter.texts()[-1]
    # Pins taken when the window was larger (another worker, an older setting) are left out of the prompt
    # past that share, and the prompt says so.
    await gateway.rt.store.pins.add("discord", "dm:c1", rule + " too", tokens, max_count=20, max_tokens=2_000)
    fake_llm.reply("d'accord")
    await adapter.say("bonjour")
    system = system_of(fake_llm.last_request)
    assert "1. Always answer in French" in system and "\n2. " not in system
    assert "(1 more pinned rules do not fit the model's window; /pins lists them.)" in system
