"""Property-based invariants over generated transcripts (hypothesis).

Transcripts mix tool calls (several per message, duplicates, huge arguments, images in results), user
images, extra system messages, odd roles and empty contents, and sometimes broken structure (orphan results,
missing results, unparsable arguments). For EVERY output: tool pairs are valid, the last user message and the
last assistant message with text are kept verbatim, the system prompt is kept, arguments are valid JSON, no
image precedes the newest user image, and tokens never grow (see `helpers.check_invariants`).

Examples per property: 300 by default; set CONCORD_HYPOTHESIS_EXAMPLES=5000 for a deep run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent.llm.errors import AuthError, ServerError
from tests.compression.helpers import (
    ScriptedProvider,
    check_invariants,
    image_part,
    make_compressor,
)

EXAMPLES = int(os.environ.get("CONCORD_HYPOTHESIS_EXAMPLES", "300"))
WORDS = ("alpha beta gamma delta deploy test error fix file path config value retry commit branch token "
         "über données 数据 テスト — 42 3.14 /srv/app/main.py `npm test` {\"k\": 1}").split()
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


@st.composite
def transcripts(draw: st.DrawFn) -> list[dict[str, Any]]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    size = draw(st.sampled_from([5, 40, 400]))
    messages: list[dict[str, Any]] = []
    if draw(st.integers(0, 9)) > 0:
        messages.append({"role": "system", "content": "SYSTEM " + _text(rng, 30)})
    ids = 0
    shared_output = _text(rng, 300)
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["user", "user", "user_image", "assistant", "assistant", "tools", "tools",
                                     "tools", "system", "odd"]))
        if kind == "user":
            messages.append({"role": "user", "content": _text(rng, rng.randint(0, size))})
        elif kind == "user_image":
            messages.append({"role": "user", "content": [{"type": "text", "text": _text(rng, 5)}, image_part()]})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": _text(rng, rng.randint(0, size)) or None})
        elif kind == "system":
            messages.append({"role": "system", "content": "NOTE " + _text(rng, 10)})
        elif kind == "odd":
            messages.append(rng.choice([{"role": "developer", "content": _text(rng, 8)},
                                        {"role": "assistant", "content": ""},
                                        {"role": "user", "content": None},
                                        {"role": "assistant", "content": [{"type": "text", "text": _text(rng, 6)}]}]))
        else:
            calls, results = [], []
            for _ in range(rng.randint(1, 3)):
                ids += 1
                call_id = f"call_{ids}"
                args: Any = {"path": f"src/f{ids}.py", "content": _text(rng, rng.choice([3, 30, 1_500]))}
                arguments = json.dumps(args) if rng.random() > 0.05 else '{"broken": '
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": rng.choice(["terminal", "read_file", "write_file", "search"]),
                                           "arguments": arguments}})
                body: Any = rng.choice([_text(rng, rng.randint(1, size)), shared_output, "ok"])
                if rng.random() < 0.1:
                    body = [{"type": "text", "text": "screenshot"}, image_part()]
                if rng.random() > 0.03:
                    results.append({"role": "tool", "tool_call_id": call_id, "content": body})
            text = _text(rng, 4) if rng.random() < 0.3 else None
            messages.append({"role": "assistant", "content": text, "tool_calls": calls})
            messages.extend(results)
            if rng.random() < 0.03:
                messages.append({"role": "tool", "tool_call_id": "ghost", "content": "orphan"})
    return messages


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "context_length": draw(st.sampled_from([2_000, 6_000, 20_000, 64_000])),
        "threshold": draw(st.sampled_from([0.3, 0.5, 0.9])),
        "protect_first_n": draw(st.integers(0, 4)),
        "protect_last_n": draw(st.integers(0, 25)),
    }


def _provider(choice: int) -> ScriptedProvider | None:
    if choice == 0:
        return None
    if choice == 1:
        return ScriptedProvider(["## Goal\nsummarized goal\n## Completed Actions\n1. ran tests"] * 3)
    if choice == 2:
        return ScriptedProvider([ServerError("x")] * 3)
    return ScriptedProvider([AuthError("no", status=401)] * 3)


@SETTINGS
@given(transcripts(), configs(), st.integers(0, 3), st.booleans())
def test_invariants_hold_for_every_output(messages: list[dict[str, Any]], config: dict[str, Any],
                                          provider_choice: int, twice: bool) -> None:
    compressor = make_compressor(summary_provider=_provider(provider_choice), **config)
    before = json.dumps(messages)
    result = asyncio.run(compressor.compress(messages, force=True))
    assert json.dumps(messages) == before, "input mutated"
    event(f"summary={result.summary_kind} aborted={result.aborted}")
    check_invariants(messages, result.messages, result.compressed)
    if result.aborted or not result.compressed:
        assert result.messages == messages
    if twice and result.compressed:
        grown = [*result.messages, {"role": "user", "content": "and then?"}, {"role": "assistant", "content": "ok"}]
        again = asyncio.run(compressor.compress(grown, force=True))
        check_invariants(grown, again.messages, again.compressed)


@SETTINGS
@given(transcripts(), configs())
def test_has_content_to_compress_agrees_with_compress(messages: list[dict[str, Any]], config: dict[str, Any]) -> None:
    compressor = make_compressor(**config)
    has_content = compressor.has_content_to_compress(messages)
    result = asyncio.run(compressor.compress(messages, force=True))
    if not has_content:
        assert not result.compressed and result.reason.startswith("nothing to compress")
    else:
        assert not result.reason.startswith("nothing to compress")
