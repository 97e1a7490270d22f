"""Stage 0, clipping: one message too large for the window keeps its head and tail with a marker; the
compressor applies it before the guard, and `concord compress` says when even that does not fit."""

from __future__ import annotations

import io
import json
from pathlib import Path

from agent.compression.cli import run_compress_command
from agent.compression.clip import (
    clear_clip_cache,
    clip_limit,
    clip_marker,
    clip_oversized,
    clip_text,
    clip_text_counted,
)
from agent.compression.compressor import ContextCompressor
from agent.tokens import TokenCounter, get_counter
from tests.compression.helpers import ScriptedProvider, assistant, call, is_clip_of, result, system, user

COUNTER = get_counter()


def _prose(tokens: int) -> str:
    return " ".join(f"word{i % 97}" for i in range(tokens // 2))


def test_a_text_over_the_limit_keeps_head_and_tail_with_a_marker() -> None:
    text = _prose(20_000)
    clipped = clip_text(text, 1_000, COUNTER)
    assert clipped is not None and COUNTER.count_text(clipped) <= 1_000
    assert is_clip_of(text, clipped)
    assert "characters (about " in clipped and "The whole message is stored" in clipped
    assert clip_text(clipped, 1_000, COUNTER) is None  # a clipped text fits: never clipped twice
    assert clip_text("short", 1_000, COUNTER) is None


def test_a_clipped_texts_count_is_its_exact_count_and_a_known_count_spares_the_whole_text() -> None:
    text = _prose(20_000)
    clipped, tokens = clip_text_counted(text, 1_000, COUNTER) or ("", 0)
    assert clipped == clip_text(text, 1_000, COUNTER) and tokens == COUNTER.count_text(clipped)
    counter = TokenCounter()
    seen: list[str] = []
    real = counter.count_text
    counter.count_text = lambda t: seen.append(t) or real(t)  # type: ignore[method-assign]
    assert clip_text_counted(text, 1_000, counter, tokens=COUNTER.count_text(text)) == (clipped, tokens)
    assert text not in seen


def test_a_text_clipped_again_is_rebuilt_without_tokenizing_and_is_what_a_fresh_process_makes() -> None:
    clear_clip_cache()
    text = _prose(20_000)
    counter = TokenCounter()
    seen: list[str] = []
    real = counter.count_text
    counter.count_text = lambda t: seen.append(t) or real(t)  # type: ignore[method-assign]
    for limit in (1_000, 10):  # (10: no head and tail fit beside the note, which stands alone)
        first = clip_text_counted(text, limit, counter)
        tokenized = len(seen)
        assert first is not None and tokenized >= 2  # the text and a try
        assert clip_text_counted(text, limit, counter) == first and len(seen) == tokenized
        clear_clip_cache()
        assert clip_text_counted(text, limit, TokenCounter()) == first
    assert clip_text_counted(text, 10, counter)[0] == clip_marker(len(text), COUNTER.count_text(text)).strip()  # type: ignore[index]
    # Another limit, marker, given count or text is clipped as a fresh process clips it, not as one remembered.
    clip_text_counted(text, 1_000, counter)
    for args, kwargs in (((text, 900), {}), ((text, 1_000, lambda cut, tokens: f"[{cut} cut]"), {}),
                         ((text + " more", 1_000), {}), ((text, 1_000), {"tokens": COUNTER.count_text(text)})):
        again = clip_text_counted(args[0], args[1], counter, *args[2:], **kwargs)
        clear_clip_cache()
        assert again == clip_text_counted(args[0], args[1], TokenCounter(), *args[2:], **kwargs)
        assert again != clip_text_counted(text, 1_000, counter) or "tokens" in kwargs


def test_clipped_messages_are_the_same_with_counts_given_and_their_counts_are_exact() -> None:
    huge = _prose(12_000)
    messages = [system("sys"), {**user(huge), "name": "bob"}, call("c1", "terminal", {"cmd": huge[:9_000]}),
                result("c1", huge), assistant(huge), user([{"type": "text", "text": huge}]),
                call("c2", "terminal", {"cmd": "ls"}, text=huge), result("c2", "ok")]
    counter = TokenCounter()
    given = clip_oversized(messages, 2_000, counter, counter.count_each(messages))
    assert given == clip_oversized(messages, 2_000, TokenCounter()) and given.clipped == 5
    # A call's own text is clipped like any other (its count holds the calls as well).
    assert is_clip_of(huge, given.messages[6]["content"])
    # The counts the clipping remembered for its copies are what a fresh counter finds.
    fresh = TokenCounter()
    assert counter.count_each(given.messages) == [fresh.count_message(m) for m in given.messages]


def test_every_role_but_system_is_clipped_and_the_input_is_untouched() -> None:
    big = _prose(5_000)
    messages = [system(big), user(big), {"role": "assistant", "content": big},
                {"role": "tool", "tool_call_id": "t", "content": [{"type": "text", "text": big}]}, user("ok")]
    before = json.dumps(messages)
    result = clip_oversized(messages, 500, COUNTER)
    assert result.clipped == 3 and json.dumps(messages) == before
    assert result.messages[0] == messages[0] and result.messages[-1] == messages[-1]
    assert all(COUNTER.count_message(m) <= 520 for m in result.messages[1:])


def test_the_limit_leaves_room_for_the_whole_minimum_tail() -> None:
    assert clip_limit(100_000) == 30_000
    assert clip_limit(100_000, 8) == 9_375
    assert clip_limit(2_611, 8) == 244
    assert clip_limit(10) == 64


async def test_a_single_huge_message_is_clipped_though_the_guard_applies() -> None:
    engine = ContextCompressor(context_length=200_000, max_tokens=8_192, summary_provider=ScriptedProvider([]))
    paste = _prose(300_000)
    messages = [system("You help."), user(paste)]
    assert engine.has_content_to_compress(messages)
    assert not engine.will_summarize(messages)  # no summary call: clipping alone
    result = await engine.compress(messages)
    assert result.compressed and result.summary_kind == "none" and "clipped 1" in result.reason
    # The live message keeps all the window leaves it beside the answer, a summary's room and the margin.
    assert 140_000 < result.tokens_after < 200_000 - 8_192 - 4_000 < result.tokens_before
    assert is_clip_of(paste, result.messages[-1]["content"])


async def test_a_live_message_that_fits_the_window_reaches_the_model_whole() -> None:
    # 38K tokens in a 200K window (the corpus's swe_django__django-15629 is such a message): never clipped,
    # although it is more than 30% of the threshold; once it is an old message, it is.
    engine = ContextCompressor(context_length=200_000, max_tokens=8_192, summary_provider=None)
    paste = _prose(38_000)
    chat = [system("You help."), *[m for i in range(12) for m in (user(f"q{i} " + _prose(3_000)),
                                                                    assistant(f"a{i} " + _prose(3_000)))]]
    live = [*chat, user(paste)]
    result = await engine.compress(live, force=True)
    assert result.compressed and result.messages[-1]["content"] == paste
    assert result.tokens_after <= engine.threshold_tokens
    older = await engine.compress([*live, assistant("done"), user("next")], force=True)
    assert all(m.get("content") != paste for m in older.messages)


async def test_a_huge_answer_in_the_tail_is_clipped_while_the_middle_is_summarized() -> None:
    provider = ScriptedProvider(["## Goal\nThe user asked many things."])
    engine = ContextCompressor(context_length=8_000, summary_provider=provider)
    chat = [system("You help.")]
    for i in range(12):
        chat += [user(f"question {i} " + _prose(200)), {"role": "assistant", "content": f"answer {i} " + _prose(200)}]
    answer = _prose(6_000)
    chat += [user("and now everything"), {"role": "assistant", "content": answer}, user("thanks")]
    result = await engine.compress(chat)
    assert result.compressed and result.summary_kind == "llm" and provider.calls
    assert is_clip_of(answer, result.messages[-2]["content"])
    assert result.messages[-1] == user("thanks")


def test_concord_compress_exits_1_when_the_result_still_does_not_fit(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    # The system prompt (the operator's) is never clipped: nothing can make this fit a 1,000-token window.
    lines = [system(_prose(3_000)), *[user(_prose(3_000)), {"role": "assistant", "content": "ok"}] * 3]
    src.write_text("".join(json.dumps(m) + "\n" for m in lines), encoding="utf-8")
    stderr = io.StringIO()
    code = run_compress_command([str(src), "-o", str(tmp_path / "out.jsonl"), "--summary", "static",
                                 "--context-length", "1000"], stdout=io.StringIO(), stderr=stderr)
    assert code == 1
    assert stderr.getvalue().startswith("concord: warning: the result still does not fit: ")
