"""Summary calls count against budgets: the sender whose message set off a compaction pays for its
summary, with the chat — hygiene before the turn, the agent's own preflight compaction — and a scheduled
sweep's summary is charged to the chat alone. /usage shows the summaries' share."""

from __future__ import annotations

from typing import Any

from gateway.conversation.sweep import sweep
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.llm_wire import Reply
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, bulk_session, chatter, is_summary_request

SUMMARY_USAGE = {"prompt_tokens": 5_000, "completion_tokens": 500}
CHAT_USAGE = {"prompt_tokens": 100, "completion_tokens": 10}


def priced(server: FakeLLMServer) -> list[str]:
    """Answer summary calls at 5,500 tokens and chat calls at 110; return the kinds asked, in order."""
    kinds: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            kinds.append("summary")
            return Reply(f"## Goal\n{SUMMARY_MARKER} the user chatted.", usage=SUMMARY_USAGE)
        kinds.append("chat")
        return Reply("answer", usage=CHAT_USAGE)

    server.responder = respond
    return kinds


async def test_a_hygiene_summary_is_charged_to_the_sender_and_counts_against_the_budget(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(limits={"user_tokens_per_day": 5_000})
    await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=170_000)
    kinds = priced(fake_llm)
    await adapter.say("and now?")
    assert kinds == ["summary", "chat"] and adapter.texts()[-1] == "answer"
    await adapter.say("/usage")
    assert adapter.texts()[-1].startswith(
        "Today (UTC): you 5,610 tokens of 5,000, 5,500 of them summaries (5,000 in, 500 out); "
        "this chat 5,610 tokens (no daily limit), 5,500 of them summaries (5,000 in, 500 out).")
    await adapter.say("one more?")
    assert adapter.texts()[-1].startswith("⏳ You have used today's token budget (5,000 tokens).")
    assert kinds == ["summary", "chat"]  # refused before any call


async def test_with_prices_usage_and_stats_tell_what_the_summaries_cost(gateway_factory: GatewayFactory,
                                                                        fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(pricing={"input": 3.0, "output": 15.0})
    await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=170_000)
    priced(fake_llm)
    await adapter.say("and now?")
    await adapter.say("/usage")
    # 5,000 in at $3/M and 500 out at $15/M: $0.0225.
    assert adapter.texts()[-1].startswith(
        "Today (UTC): you 5,610 tokens (no daily limit), 5,500 of them summaries (5,000 in, 500 out, $0.0225);")
    await adapter.say("/stats", user_id="boss")
    # Everything: 5,100 in and 510 out ($0.0230); the summary's share as above.
    assert "Cost (pricing.*): $0.0230, of it summaries $0.0225" in adapter.texts()[-1]


async def test_the_agents_own_compaction_is_charged_to_the_sender(gateway_factory: GatewayFactory,
                                                                  fake_llm: FakeLLMServer) -> None:
    """A preflight compaction runs inside the agent loop's own task: the payer named around the turn still
    applies there."""
    gateway, adapter = await gateway_factory(llm={"context_length": 100_000}, limits={"chat_tokens_per_day": 5_000})
    session_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    kinds = priced(fake_llm)
    await adapter.say("what next?")
    assert kinds == ["summary", "chat"]
    assert [h.reason for h in await gateway.rt.store.compactions.history(session_id)] == ["agent: preflight"]
    usage = await gateway.router.limiter.usage(adapter.inbound("x"), exempt=False)
    assert (usage.user_tokens, usage.user_summary_tokens, usage.chat_tokens, usage.chat_summary_tokens) == (
        5_610, 5_500, 5_610, 5_500)
    await adapter.say("and then?")
    assert adapter.texts()[-1].startswith("⏳ This chat has used today's token budget (5,000 tokens).")


async def test_a_sweep_summary_is_charged_to_the_chat_alone(gateway_factory: GatewayFactory,
                                                            fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000}, gateway={"hygiene_hard_message_limit": 30})
    await bulk_session(gateway, "dm:a", chatter(31, words=100))
    kinds = priced(fake_llm)
    report = await sweep(gateway.sessions)
    assert report.compressed == 1 and kinds == ["summary"]
    limiter = gateway.router.limiter
    usage = await limiter.usage(adapter.inbound("x", chat_id="a", user_id="u7"), exempt=False)
    assert (usage.user_tokens, usage.chat_tokens, usage.chat_summary_tokens) == (0, 5_500, 5_500)
    assert await limiter.top_spenders() == []  # no user caused it
