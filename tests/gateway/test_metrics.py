"""Observability (docs/rules.md §8): the runtime's `Metrics` through the real gateway, /stats, and the structured
compaction log line."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.events import EVENT_LLM_RESPONSE, AgentEvent
from gateway.conversation.commands import OPERATOR_REFUSAL, REFUSAL
from gateway.conversation.sweep import sweep
from gateway.ops.metrics import Metrics, compression_kind, fan_out, percentile
from gateway.router import Router
from gateway.store import EngineState
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import (
    SUMMARY_MARKER,
    GatewayFactory,
    answer_by_kind,
    bulk_session,
    chatter,
    is_summary_request,
)

CONTENT_MARKER = "PRIVATE-WORDS-93c1"


def usage_by_kind(server: FakeLLMServer) -> list[tuple[str, dict[str, int]]]:
    """Answer every request with distinct explicit usage; a chat request saying "tool" gets two tool calls
    first (one real, one unknown). Returns what was reported, as (kind, usage)."""
    reported: list[tuple[str, dict[str, int]]] = []

    def respond(body: dict[str, Any]) -> Reply:
        n = len(reported) + 1
        usage = {"prompt_tokens": 1_000 * n, "completion_tokens": 10 * n, "cache_read_tokens": n}
        last = (body.get("messages") or [{}])[-1]
        if is_summary_request(body):
            reported.append(("summary", usage))
            return Reply(f"## Goal\n{SUMMARY_MARKER} the user chatted.", usage=usage)
        reported.append(("chat", usage))
        if last.get("role") == "user" and "tool" in str(last.get("content")):
            return Reply("", tool_calls=[{"name": "search_history", "arguments": {"query": "billing"}},
                                         {"name": "no_such_tool", "arguments": {}}], usage=usage)
        return Reply("answer", usage=usage)

    server.responder = respond
    return reported


def private_chatter(count: int) -> list[dict[str, Any]]:
    return [{**m, "content": f"{CONTENT_MARKER} {m['content']}"} for m in chatter(count, words=60)]


def compaction_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "concord.events"]


async def test_stats_after_turns_hygiene_and_compress_shows_the_right_counts(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="concord.events")
    gateway, adapter = await gateway_factory()
    reported = usage_by_kind(fake_llm)
    await adapter.say("hello")
    await adapter.say("use a tool please")
    await bulk_session(gateway, "dm:c2", private_chatter(400), last_prompt_tokens=170_000)
    await adapter.say("and now?", chat_id="c2")  # hygiene compresses first
    await bulk_session(gateway, "dm:c3", private_chatter(400))
    await adapter.say("/compress", chat_id="c3", user_id="boss")
    manual_reply = adapter.texts("c3")[-1]
    fake_llm.fail("auth")
    await adapter.say("this turn fails")
    await adapter.say("/stats", user_id="u1")
    assert adapter.texts("c1")[-1] == REFUSAL.format(name="stats")
    await adapter.say("/stats", user_id="boss")
    stats = adapter.texts("c1")[-1].splitlines()

    assert [kind for kind, _ in reported] == ["chat", "chat", "chat", "summary", "chat", "summary"]
    assert len(fake_llm.requests) == len(reported) + 1  # + the failed one, which no event reports (no usage)
    prompt, completion, cached = (sum(u[key] for _, u in reported)
                                  for key in ("prompt_tokens", "completion_tokens", "cache_read_tokens"))
    assert stats[0].startswith("Uptime: 0h 0m · live sessions in memory: 3")
    assert stats[1] == "Messages: 7 · turns: 4 (1 failed)"
    assert re.fullmatch(r"Turn latency: p50 \d+\.\d\d s, p95 \d+\.\d\d s \(last 4 turns\)", stats[2])
    assert stats[3] == "LLM calls: 7 (5 agent, 2 summary, 0 summary failed)"  # the failed call was made too
    summaries = [u for kind, u in reported if kind == "summary"]
    assert stats[4] == (f"Tokens: {prompt:,} prompt, {completion:,} completion, {cached:,} cache read (summaries: "
                        f"{sum(u['prompt_tokens'] for u in summaries):,} prompt, "
                        f"{sum(u['completion_tokens'] for u in summaries):,} completion)")
    assert stats[5] == "Tool calls: 2 (1 failed)"

    logged = compaction_records(caplog)
    assert [(r.kind, r.reason) for r in logged] == [("hygiene: tokens", "hygiene: tokens"),
                                                    ("manual /compress", "manual /compress")]
    saved = sum(r.tokens_before - r.tokens_after for r in logged)
    assert stats[6] == f"Compressions: 2 · saved {saved:,} tokens · aborted 0 · static fallback 0"
    hygiene_pct, manual_pct = (round(r.savings_pct) for r in logged)
    assert stats[7:9] == [f"  hygiene: tokens — 1 (avg {hygiene_pct}% saved)",
                          f"  manual /compress — 1 (avg {manual_pct}% saved)"]
    # Budgets count the agent's own calls and the summaries each sender caused: u1's message set off the
    # hygiene compaction, boss ran /compress.
    spent = sum(u["prompt_tokens"] + u["completion_tokens"] for kind, u in reported[:5])
    manual_cost = reported[5][1]["prompt_tokens"] + reported[5][1]["completion_tokens"]
    assert stats[9:] == [f"Top spenders today: discord:u1 {spent:,}, discord:boss {manual_cost:,}"]
    # The chat tells the conversation as stored (`concord sessions show`); the log line, the engine's figures,
    # also counts the system prompt it was given.
    manual = logged[1]
    said = re.fullmatch(r"Compressed: (\d+) → (\d+) messages, [\d,]+ → [\d,]+ tokens \(\d+% saved\)\.", manual_reply)
    assert said is not None, manual_reply
    assert (int(said[1]) + 1, int(said[2]) + 1) == (manual.messages_before, manual.messages_after)
    assert all(CONTENT_MARKER not in line and SUMMARY_MARKER not in line for line in stats)


async def test_each_compaction_is_one_structured_log_line_without_content(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="concord.events")
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", private_chatter(400))
    answer_by_kind(fake_llm)
    await adapter.say("/compress", user_id="boss")
    [record] = compaction_records(caplog)
    assert record.levelno == logging.INFO
    fields = {k: getattr(record, k) for k in ("event", "session", "kind", "reason", "messages_before",
                                              "messages_after", "tokens_before", "tokens_after", "savings_pct",
                                              "summary_kind", "aborted")}
    assert fields["event"] == "session:compress" and fields["session"] == session_id
    assert (fields["kind"], fields["summary_kind"], fields["aborted"]) == ("manual /compress", "llm", False)
    assert fields["messages_before"] == 401 and fields["messages_after"] < 401  # with the system prompt
    assert 0 < fields["tokens_after"] < fields["tokens_before"]
    text = record.getMessage()
    assert f"messages=401->{fields['messages_after']}" in text and f"session={session_id}" in text
    assert "kind='manual /compress'" in text and '"' not in text  # stays valid inside the json_logs line format
    for value in (text, *map(str, fields.values())):
        assert CONTENT_MARKER not in value and SUMMARY_MARKER not in value


async def test_static_fallback_and_aborted_compressions_are_counted(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="concord.events")
    gateway, adapter = await gateway_factory()
    metrics = gateway.rt.metrics
    # Hygiene while the summary model cools down: a static fallback summary, no summary call.
    cooling = await bulk_session(gateway, "dm:c1", chatter(400, words=60))
    await gateway.rt.store.sessions.save_engine_state(cooling, EngineState(
        last_prompt_tokens=170_000, cooldown_until=datetime.now(UTC) + timedelta(minutes=5)))
    kinds = answer_by_kind(fake_llm)
    await adapter.say("go on")
    assert kinds == ["chat"]
    # /compress whose summary call fails on auth: aborted, the conversation unchanged.
    await bulk_session(gateway, "dm:c2", chatter(400, words=60))
    fake_llm.fail("auth")
    await adapter.say("/compress", chat_id="c2", user_id="boss")
    assert adapter.texts("c2")[-1].startswith("⚠️ Compression aborted")
    # The agent's recovery compression aborting the same way: the loop only says so as a notice.
    await bulk_session(gateway, "dm:c3", chatter(400, words=60))
    fake_llm.fail("context_overflow", limit=200_000, prompt=250_000)
    fake_llm.fail("auth")
    await adapter.say("hi", chat_id="c3")

    tallies = metrics.compressions
    assert (tallies["hygiene: tokens"].count, tallies["hygiene: tokens"].static) == (1, 1)
    assert (tallies["manual /compress"].count, tallies["manual /compress"].aborted) == (0, 1)
    assert (tallies["agent"].count, tallies["agent"].aborted) == (0, 1)
    assert (metrics.summary_calls, metrics.summary_failures) == (2, 2)
    assert (metrics.turns, metrics.turn_failures) == (2, 1)
    logged = compaction_records(caplog)
    assert [(r.kind, r.aborted) for r in logged] == [("hygiene: tokens", False), ("manual /compress", True),
                                                     ("agent", True)]
    assert logged[0].summary_kind == "static"
    await adapter.say("/stats", user_id="boss")
    stats = adapter.texts("c1")[-1].splitlines()
    assert stats[6].endswith("· aborted 2 · static fallback 1")
    assert "  manual /compress — 0 (avg 0% saved), 1 aborted" in stats


async def test_sweep_compressions_are_counted_as_the_sweeps(gateway_factory: GatewayFactory,
                                                           fake_llm: FakeLLMServer) -> None:
    gateway, _ = await gateway_factory()
    await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=180_000)
    answer_by_kind(fake_llm)
    seen: list[str] = []

    async def listener(event: AgentEvent) -> None:
        seen.append(event.kind)

    report = await sweep(gateway.sessions, events=listener)
    assert report.compressed == 1
    assert list(gateway.rt.metrics.compressions) == ["sweep"]
    assert gateway.rt.metrics.compressions["sweep"].count == 1
    assert seen == ["session:compress"]


async def test_an_explicit_router_sink_hears_events_and_metrics_still_count(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    seen: list[AgentEvent] = []

    async def broken(event: AgentEvent) -> None:
        raise RuntimeError("a listener's own bug")

    async def listener(event: AgentEvent) -> None:
        seen.append(event)

    router = Router(gateway.sessions, events=fan_out(broken, listener))
    answer_by_kind(fake_llm)
    await router.handle(adapter.inbound("hi"), adapter)
    assert [e.kind for e in seen] == [EVENT_LLM_RESPONSE]
    assert (gateway.rt.metrics.messages, gateway.rt.metrics.agent_llm_calls) == (1, 1)
    assert adapter.texts()[-1] == "answer"


def test_turn_times_are_a_bounded_ring_of_the_most_recent() -> None:
    metrics = Metrics(window=5)
    for seconds in range(1, 21):
        metrics.record_turn(float(seconds), failed=seconds % 10 == 0)
    assert list(metrics.turn_seconds) == [16.0, 17.0, 18.0, 19.0, 20.0]
    assert metrics.turn_latency() == (18.0, 20.0)
    assert (metrics.turns, metrics.turn_failures) == (20, 2)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    values = [float(v) for v in range(20, 0, -1)]
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 1.0)) == (10.0, 19.0, 20.0)
    assert percentile([3.0], 0.95) == 3.0


async def test_unknown_reasons_share_one_tally() -> None:
    from agent.compression.engine import CompressionResult
    from agent.turn import Compaction

    metrics = Metrics()
    for i in range(50):
        result = CompressionResult([], True, 10, 4, 1_000, 400, summary_kind="llm")
        await metrics(AgentEvent("session:compress", "s", {"compaction": Compaction(f"odd {i}", result, "", "s", "s"),
                                                          "result": result}))
    assert list(metrics.compressions) == ["other"]
    assert (metrics.compressions["other"].count, metrics.compressions["other"].tokens_saved) == (50, 30_000)
    assert compression_kind("agent: recovery") == compression_kind("recovery") == "agent: recovery"
    assert compression_kind("hygiene: message count") == "hygiene: messages"


async def test_stats_are_for_operators_not_community_admins(gateway_factory: GatewayFactory) -> None:
    _, adapter = await gateway_factory()
    # A Discord admin role / Telegram chat admin runs one community; gateway-wide figures cover all of them.
    await adapter.say("/stats", user_id="mod", admin_hint=True)
    assert adapter.texts("c1")[-1] == OPERATOR_REFUSAL
    await adapter.say("/stats", user_id="boss")
    assert adapter.texts("c1")[-1].startswith("Uptime:")
