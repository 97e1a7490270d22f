"""The summary failure tree (R-C8) with an in-process provider raising LLM-layer errors."""

from __future__ import annotations

import re

import pytest

from agent.compression.parts import MAX_PARTS
from agent.compression.summarizer import NO_PROVIDER_COOLDOWN_S
from agent.llm.errors import AuthError, ContextOverflow, NetworkError, RateLimited, ServerError
from agent.tokens import get_counter
from tests.compression.helpers import (
    Clock,
    ScriptedProvider,
    assistant,
    coding_session,
    make_compressor,
    system,
    user,
)

GOOD = "## Goal\nfinish the test fixes"


async def test_no_provider_cools_down_600s_and_falls_back_to_static() -> None:
    clock = Clock()
    compressor = make_compressor(clock=clock)
    out = await compressor.compress(coding_session(20))
    assert out.compressed and out.summary_kind == "static"
    assert out.reason == "static fallback summary (no summary provider configured)"
    assert compressor.cooldown_remaining == NO_PROVIDER_COOLDOWN_S == 600.0


async def test_no_provider_with_abort_on_failure_aborts() -> None:
    compressor = make_compressor(abort_on_summary_failure=True)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    assert out.aborted and not out.compressed and out.messages == messages
    assert out.reason.endswith("conversation frozen, run /compress to retry or /new")
    assert compressor.last_compress_aborted and compressor.compression_count == 0


@pytest.mark.parametrize(
    ("error", "flag"),
    [(AuthError("bad key sk-proj-SECRETSECRETSECRET12", status=401), "auth_failure"),
     (AuthError("forbidden", status=403), "auth_failure"),
     (NetworkError("peer closed connection"), "network_failure")],
)
async def test_auth_and_network_failures_abort(error: Exception, flag: str) -> None:
    clock = Clock()
    provider = ScriptedProvider([error])
    compressor = make_compressor(summary_provider=provider, clock=clock)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    assert out.aborted and out.messages == messages and out.summary_kind == "none"
    assert getattr(compressor, flag) and compressor.last_compress_aborted
    assert "Context compression aborted" in out.reason and "SECRET" not in out.reason
    assert compressor.cooldown_remaining == 30.0
    # Still frozen while cooling down, without calling the model again.
    again = await compressor.compress(messages)
    assert again.aborted and len(provider.calls) == 1 and "cooling down" in again.reason
    # A manual /compress bypasses the cooldown and succeeds once the model answers.
    provider.script = [GOOD]
    forced = await compressor.compress(messages, force=True)
    assert forced.compressed and forced.summary_kind == "llm" and not compressor.last_compress_aborted
    assert not getattr(compressor, flag) and compressor.cooldown_remaining == 0


async def test_transient_failure_retries_once_on_main_model_then_sticks_to_it() -> None:
    aux = ScriptedProvider([ServerError("boom", status=500)], model="aux-small")
    main = ScriptedProvider([GOOD, GOOD], name="main", model="main-big")
    compressor = make_compressor(summary_provider=aux, main_provider=main)
    out = await compressor.compress(coding_session(20))
    assert out.summary_kind == "llm" and len(aux.calls) == 1 and len(main.calls) == 1
    await compressor.compress(coding_session(20))
    assert len(aux.calls) == 1 and len(main.calls) == 2, "after a fallback the main model summarizes"


async def test_auth_failure_on_aux_recovers_on_main() -> None:
    aux = ScriptedProvider([AuthError("no", status=401)], model="aux")
    main = ScriptedProvider([GOOD], name="main", model="main")
    compressor = make_compressor(summary_provider=aux, main_provider=main)
    out = await compressor.compress(coding_session(20))
    assert out.summary_kind == "llm" and not compressor.auth_failure


async def test_other_failures_fall_back_to_static_with_transient_cooldown() -> None:
    clock = Clock()
    aux = ScriptedProvider([ServerError("x", status=502)], model="aux")
    main = ScriptedProvider([ContextOverflow("too long")], name="main", model="main")
    compressor = make_compressor(summary_provider=aux, main_provider=main, clock=clock)
    out = await compressor.compress(coding_session(20))
    assert out.compressed and out.summary_kind == "static" and not out.aborted
    assert "aux: ServerError (HTTP 502)" in out.reason and "main: ContextOverflow" in out.reason
    assert compressor.cooldown_remaining == 30.0
    # In cooldown, no call is made and the static summary is used again.
    clock.now += 10
    second = await compressor.compress(coding_session(20))
    assert second.summary_kind == "static" and len(aux.calls) == 1 and "cooling down (20s left)" in second.reason


@pytest.mark.parametrize(("retry_after", "cooldown"), [(45.0, 45.0), (500.0, 60.0), (1.0, 30.0), (None, 30.0)])
async def test_transient_cooldown_is_30_to_60_seconds(retry_after: float | None, cooldown: float) -> None:
    provider = ScriptedProvider([RateLimited("slow down", retry_after=retry_after)])
    compressor = make_compressor(summary_provider=provider, clock=Clock())
    await compressor.compress(coding_session(20))
    assert compressor.cooldown_remaining == cooldown


@pytest.mark.parametrize("empty", ["", "  \n ", "<think>only thinking</think>"])
async def test_empty_summary_is_a_failure_not_a_summary(empty: str) -> None:
    provider = ScriptedProvider([empty])
    compressor = make_compressor(summary_provider=provider)
    out = await compressor.compress(coding_session(20))
    assert out.summary_kind == "static" and "empty summary" in out.reason


async def test_same_model_is_not_retried() -> None:
    aux = ScriptedProvider([ServerError("x")], name="p", model="m")
    main = ScriptedProvider([GOOD], name="p", model="m")
    compressor = make_compressor(summary_provider=aux, main_provider=main)
    out = await compressor.compress(coding_session(20))
    assert out.summary_kind == "static" and main.calls == []


async def test_abort_on_summary_failure_turns_any_failure_into_abort() -> None:
    provider = ScriptedProvider([ServerError("x")])
    compressor = make_compressor(summary_provider=provider, abort_on_summary_failure=True)
    out = await compressor.compress(coding_session(20))
    assert out.aborted and "ServerError" in out.reason


async def test_secrets_are_redacted_before_the_call_and_after() -> None:
    provider = ScriptedProvider(["## Critical Context\nAPI key sk-proj-LEAKEDLEAKEDLEAKED99 and password=hunter22"])
    compressor = make_compressor(summary_provider=provider)
    messages = coding_session(20)
    messages[5] = user("deploy with token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    out = await compressor.compress(messages)
    prompt = provider.calls[0]["messages"][0]["content"]
    assert "ghp_abcdef" not in prompt and "[REDACTED]" in prompt
    summary = out.messages[out.head_end]["content"]
    assert "LEAKED" not in summary and "hunter22" not in summary and summary.count("[REDACTED]") == 2


async def test_the_summary_call_asks_for_no_prompt_cache_markers() -> None:
    # No later request repeats a summary prompt: a marker would only bill it as a cache write (1.25× input).
    provider = ScriptedProvider([GOOD])
    out = await make_compressor(summary_provider=provider).compress(coding_session(20))
    assert out.summary_kind == "llm" and [call["cache"] for call in provider.calls] == [False]


async def test_a_middle_larger_than_the_summary_window_is_summarized_in_parts() -> None:
    provider = ScriptedProvider([f"## Goal\npart {i} summary" for i in range(1, 5)])
    compressor = make_compressor(context_length=60_000, summary_context_length=45_000, summary_provider=provider)
    prose = " ".join(f"detail{k}" for k in range(600))
    messages = [system(), *[m for i in range(100) for m in (user(f"ask {i} {prose}"), assistant(f"reply {i}"))]]
    out = await compressor.compress(messages)
    assert out.summary_kind == "llm" and "part 3 summary" in out.messages[out.head_end]["content"]
    prompts = [call["messages"][0]["content"] for call in provider.calls]
    assert len(prompts) == 3  # about 120K tokens of middle, in parts of under 45K
    assert all("earlier messages omitted" not in p for p in prompts)
    # Every message reached a prompt, oldest first; each part updates the summary of the parts before it.
    assert "[USER] ask 2 detail0" in prompts[0] and "[USER] ask 64 detail0" in prompts[2]
    assert "PREVIOUS SUMMARY:\n## Goal\npart 1 summary" in prompts[1]
    for prompt, call in zip(prompts, provider.calls, strict=True):
        assert get_counter().count_text(prompt) + call["max_tokens"] <= 45_000, "every request fits the window"


async def test_what_no_part_can_hold_is_summarized_statically_never_dropped() -> None:
    provider = ScriptedProvider([f"## Goal\npart {i} summary" for i in range(1, 6)])
    compressor = make_compressor(context_length=20_000, summary_provider=provider)
    prose = " ".join(f"detail{k}" for k in range(600))
    # A session that grew far past its 20K window (a forced /compress): about 180K tokens of middle.
    messages = [system(), *[m for i in range(150) for m in (user(f"ask {i} {prose}"), assistant(f"reply {i}"))]]
    out = await compressor.compress(messages, force=True)
    prompts = [call["messages"][0]["content"] for call in provider.calls]
    assert len(prompts) == MAX_PARTS and out.summary_kind == "llm"  # at most MAX_PARTS paid calls
    # The oldest messages seed the first part as a static summary: they are summarized too.
    previous, turns = prompts[0].split("CONVERSATION TURNS TO SUMMARIZE:")
    first = int(re.match(r"\[USER\] ask (\d+) detail0", turns.lstrip())[1])
    assert first > 50  # the parts hold the newest messages…
    # …and the static summary of the older ones (its snapshot: the last ask before the parts) is their seed.
    assert f"PREVIOUS SUMMARY:\n## Historical Task Snapshot\nask {first - 1} detail0" in previous


async def test_will_summarize_is_true_exactly_when_compress_calls_the_model() -> None:
    clock = Clock()
    aux = ScriptedProvider([ServerError("x", status=502), GOOD, GOOD], model="aux")
    compressor = make_compressor(summary_provider=aux, clock=clock)
    messages = coding_session(20)
    assert not compressor.will_summarize(coding_session(1)), "nothing to compress: no call"
    assert compressor.will_summarize(messages)
    await compressor.compress(messages)  # fails: static summary, transient cooldown
    assert len(aux.calls) == 1 and compressor.cooldown_remaining > 0
    assert not compressor.will_summarize(messages), "a cooldown means a static summary, no call"
    await compressor.compress(messages)
    assert len(aux.calls) == 1
    assert compressor.will_summarize(messages, force=True), "/compress bypasses the cooldown"
    await compressor.compress(messages, force=True)
    assert len(aux.calls) == 2
    clock.now += 60
    assert compressor.will_summarize(messages)
    assert not make_compressor().will_summarize(messages), "no summary provider: static summary, no call"
