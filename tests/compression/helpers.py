"""Transcript builders, a scripted in-process Provider, and the output invariants every compression must keep."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.compression.messages import has_image, tool_call_ids
from agent.compression.summary import SUMMARY_END_MARKER
from agent.llm.base import Completion, Provider
from agent.tokens import get_counter

TODAY = datetime.date(2026, 5, 1)


def system(text: str = "You are a helpful coding assistant.") -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(call_id: str, name: str, args: Mapping[str, Any] | str, text: str | None = None) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"role": "assistant", "content": text,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def result(call_id: str, content: Any, name: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    if name:
        message["name"] = name
    return message


def image_part(data: str = "AAAA") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def coding_session(turns: int, output_lines: int = 30) -> list[dict[str, Any]]:
    """system + ``turns`` × (user ask, tool call, long tool result, assistant reply); ~400 tokens a turn."""
    messages = [system()]
    for i in range(turns):
        lines = "\n".join(f"tests/test_m{i}.py::test_case_{j} PASSED [{j * 3}%]" for j in range(output_lines))
        messages += [
            user(f"Step {i}: please run the tests for module m{i} and fix what fails."),
            call(f"call_{i}", "terminal", {"command": f"pytest tests/test_m{i}.py"}),
            result(f"call_{i}", f"collected {output_lines} items\n{lines}\nexit code: {i % 2}"),
            assistant(f"Ran the tests for m{i}: {'all passed' if i % 2 == 0 else 'one failure, fixed it'}."),
        ]
    return messages


class ScriptedProvider(Provider):
    """An in-process Provider answering from a script of texts and LLMError instances (raised in order)."""

    def __init__(self, script: Sequence[str | Exception], *, name: str = "aux", model: str = "summary-model") -> None:
        self.name = name
        self.model = model
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.closed = False

    async def complete(self, messages: Sequence[Mapping[str, Any]], *, system: str | None = None,
                       tools: Sequence[Mapping[str, Any]] | None = None, max_tokens: int | None = None,
                       model: str | None = None, stream: bool = False,
                       temperature: float | None = None, cache: bool = True) -> Completion:
        self.calls.append({"messages": list(messages), "system": system, "max_tokens": max_tokens, "cache": cache})
        step = self.script.pop(0) if self.script else "## Goal\nok"
        if isinstance(step, Exception):
            raise step
        return Completion({"role": "assistant", "content": step})

    async def aclose(self) -> None:
        self.closed = True


class Clock:
    """A settable monotonic clock."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_compressor(**overrides: Any) -> ContextCompressor:
    """A compressor with a small window so short test transcripts compress; static summaries by default."""
    options: dict[str, Any] = {"context_length": 8_000, "summary_provider": None, "today": lambda: TODAY}
    options.update(overrides)
    return ContextCompressor(**options)


# ----- invariants --------------------------------------------------------------------------------------

def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def last_with(messages: Sequence[Mapping[str, Any]], role: str, need_text: bool) -> Mapping[str, Any] | None:
    for message in reversed(messages):
        if message.get("role") == role and (not need_text or _text(message).strip()):
            return message
    return None


def pairs_valid(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Every tool result sits in the run right after the call with its id; every call has a result."""
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.get("role") == "tool":
            return False
        ids = tool_call_ids(message)
        seen: set[str] = set()
        while i < len(messages) and messages[i].get("role") == "tool":
            call_id = str(messages[i].get("tool_call_id"))
            if call_id not in ids or call_id in seen:
                return False
            seen.add(call_id)
            i += 1
        if set(ids) != seen:
            return False
    return True


def arguments_valid(messages: Sequence[Mapping[str, Any]]) -> bool:
    for message in messages:
        for tc in message.get("tool_calls") or ():
            try:
                json.loads(tc["function"]["arguments"])
            except (ValueError, TypeError, KeyError):
                return False
    return True


def no_image_before_newest_user_image(messages: Sequence[Mapping[str, Any]]) -> bool:
    newest = max((i for i, m in enumerate(messages) if m.get("role") == "user" and has_image(m)), default=-1)
    return not any(has_image(m) for m in messages[: max(newest, 0)])


_CLIP_MARKER = re.compile(r"\n\n\[… [\d,]+ characters \(about [\d,]+ tokens\) of this message were cut here.*?…\]\n\n",
                          re.DOTALL)


def is_clip_of(original: str, text: str) -> bool:
    """``text`` is ``original`` clipped (stage 0): its head, the clip marker, its tail."""
    match = _CLIP_MARKER.search(text)
    if match is None:
        return False
    head, tail = text[: match.start()], text[match.end():]
    return original.startswith(head) and original.endswith(tail) and len(head) + len(tail) < len(original)


def _content_kept(original: Any, message: Mapping[str, Any]) -> bool:
    merged = message.get("content")
    if merged == original:
        return True
    text = _text(message)
    if isinstance(original, str) and is_clip_of(original, text.rpartition(SUMMARY_END_MARKER)[2].lstrip("\n")):
        return True
    if SUMMARY_END_MARKER not in text:
        return False
    if not original:
        return text.endswith(SUMMARY_END_MARKER)
    if isinstance(original, list):
        return isinstance(merged, list) and merged[1:] == original
    return isinstance(original, str) and text.endswith(original)


def present_verbatim(original: Mapping[str, Any], output: Sequence[Mapping[str, Any]]) -> bool:
    """The message is in the output unchanged, or merged after a summary's end marker with its content intact.

    Unparsable tool-call arguments are repaired everywhere (a provider would 400 on them), so for such a
    message only the call ids must match.
    """
    valid = arguments_valid([original])
    rest = {k: v for k, v in original.items() if k != "content"}
    for message in output:
        if message.get("role") != original.get("role") or not _content_kept(original.get("content"), message):
            continue
        if valid and {k: v for k, v in message.items() if k != "content"} == rest:
            return True
        if not valid and tool_call_ids(message) == tool_call_ids(original):
            return True
    return False


def check_invariants(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], compressed: bool,
                     encoding: str = "o200k_base") -> None:
    """Assert the invariants of R-C1…R-C5 for one compression (input → output)."""
    counter = get_counter(encoding)
    assert counter.count_messages(after) <= counter.count_messages(before), "tokens grew"
    for role, need_text in (("user", False), ("assistant", True)):
        anchor = last_with(before, role, need_text)
        if anchor is not None:
            assert present_verbatim(anchor, after), f"last {role} message lost"
    if before and before[0].get("role") == "system":
        assert after[0].get("role") == "system"
        assert _text(after[0]).startswith(_text(before[0]))
    if compressed or pairs_valid(before):
        assert pairs_valid(after), "tool pairs broken"
    if compressed or arguments_valid(before):
        assert arguments_valid(after), "invalid tool-call arguments"
    if compressed or no_image_before_newest_user_image(before):
        assert no_image_before_newest_user_image(after), "historical image kept"
    if compressed:
        assert len(after) < len(before) or counter.count_messages(after) < counter.count_messages(before)


__all__ = ["TODAY", "Clock", "ScriptedProvider", "assistant", "call", "check_invariants", "coding_session",
           "image_part", "make_compressor", "result", "system", "user"]
