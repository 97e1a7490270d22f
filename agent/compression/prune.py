"""Stage 1: cheap pruning of old tool traffic, no LLM (R-C1).

Three passes over the messages before ``protect_from`` (the tail stays verbatim):
  (a) identical tool results keep only their newest full copy;
  (b) tool results over 200 chars become an informative one-liner built from the call that produced them,
      and image parts in tool results become a text placeholder (an old base64 screenshot would otherwise
      survive every compression);
  (c) oversized tool-call arguments are shrunk inside the parsed JSON, so they stay valid JSON; arguments
      that do not parse become a valid JSON stub (a provider 400s on them on every later request).
The last user message and the last assistant message with text are never touched, wherever they are.

What (b) and (c) make of one message never changes: a result's one-liner depends only on its text, its name and
the call that produced it, a call's check and shrunk arguments only on its arguments. Both are kept per message
in bounded caches, as its token count, facts and summary block are, and prepared when the message is stored
(`remember_pruned`, from `ContextCompressor.on_messages_stored`): a compaction of a long session looks them up
instead of reading every old tool output and parsing every call's arguments again. After a restart the prepared
records bring back the one-liners and what large arguments become, with the counts of the messages pruning makes
(`adopt_line`, `adopt_arguments`; `agent.compression.prepared`), so those are not tokenized again either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.blocks import keep_block
from agent.compression.boundaries import anchor_indices, walk_tail
from agent.compression.describe import describe_tool_result
from agent.compression.messages import Message, content_text, is_image_part, parse_arguments, tool_calls_of
from agent.lru import LruCache
from agent.tokens import INLINE_KEY_CHARS, TokenCounter, get_counter, key_digest, text_key

__all__ = [
    "ARGUMENTS_MAX_CHARS",
    "DUPLICATE_NOTE",
    "IMAGE_PLACEHOLDER",
    "PRUNE_MIN_CHARS",
    "PruneResult",
    "PrunedForm",
    "adopt_arguments",
    "adopt_line",
    "calls_key",
    "clear_prune_cache",
    "find_prune_boundary",
    "form_key",
    "line_key",
    "prune_messages",
    "remember_pruned",
    "result_line",
    "shrink_arguments",
]

PRUNE_MIN_CHARS = 200
DUPLICATE_NOTE = "[Duplicate tool output — same content as a more recent call]"
IMAGE_PLACEHOLDER = "[image removed from an earlier tool result]"
ARGUMENTS_MAX_CHARS = 2_000
_STRING_KEEP = 300
_LIST_KEEP = 20
PRUNE_CACHE_ENTRIES = 50_000
# Each cache is also bounded in characters: shrunk arguments keep every key of an object, so a call with thousands
# of small fields stays large.
PRUNE_CACHE_CHARS = 8_000_000
# A result's one-liner by `line_key`; a call's arguments (their `text_key`) → what `shrink_arguments` makes of
# them, `_KEEP` for "as they are" (a smaller JSON text is never empty).
_LINES: LruCache[tuple[Any, ...], str] = LruCache(PRUNE_CACHE_ENTRIES, weigh=len, budget=PRUNE_CACHE_CHARS)
_ARGUMENTS: LruCache[str | bytes, str] = LruCache(PRUNE_CACHE_ENTRIES, weigh=len, budget=PRUNE_CACHE_CHARS)
_KEEP = ""
# What a prepared record says of the message pruning makes of one (a result with its one-liner, a call's message
# with its arguments shrunk): the encoding, its token count, its summary block's count and whether that block is
# its `serialize_unredacted`.
FormCounts = tuple[str, int, int, bool]
# Pruned forms adopted from prepared records, by the `key_digest` of their `form_key`, with the counts of the message
# they make: a result's one-liner, a call message's arguments (each call's; None: kept). A message whose form key has
# that digest takes them when pruning first looks it up (only what a compaction prunes is checked), and the message
# it becomes is then neither tokenized nor serialized again.
_ADOPTED_LINES: LruCache[str, tuple[str, FormCounts]] = LruCache(
    PRUNE_CACHE_ENTRIES, weigh=lambda adopted: len(adopted[0]), budget=PRUNE_CACHE_CHARS)
_ADOPTED_CALLS: LruCache[str, tuple[tuple[str | None, ...], FormCounts]] = LruCache(
    PRUNE_CACHE_ENTRIES, weigh=lambda adopted: sum(len(arguments or "") for arguments in adopted[0]),
    budget=PRUNE_CACHE_CHARS)


@dataclass(frozen=True, slots=True)
class PrunedForm:
    """What pruning makes of one message, for a prepared record: what it depends on (`form_key`), what replaces
    the message's part (a result's one-liner, or each call's arguments, None where kept) and the message it
    becomes."""

    key: tuple[Any, ...]
    replacement: str | tuple[str | None, ...]
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PruneResult:
    """The pruned list plus what each pass changed."""

    messages: list[dict[str, Any]]
    deduplicated: int = 0
    summarized: int = 0
    images_removed: int = 0
    arguments_shrunk: int = 0

    @property
    def pruned(self) -> int:
        """Number of messages changed by any pass."""
        return self.deduplicated + self.summarized + self.images_removed + self.arguments_shrunk


def find_prune_boundary(
    messages: Sequence[Message], tail_budget: int, min_tail: int, counter: TokenCounter,
    counts: Sequence[int] | None = None,
) -> int:
    """First index of the protected tail: the newest messages within ``tail_budget`` tokens, at least ``min_tail``."""
    return walk_tail(messages, 0, tail_budget, min_tail, counter, counts)


def _content_key(content: Any) -> tuple[str, int]:
    """(identity, serialized size) of a tool result's content: the text itself, so equal means equal (a
    truncated hash could call two different outputs duplicates) and a text seen before costs no hashing."""
    raw = content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False)
    return raw, len(raw)


def _shrink_value(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _STRING_KEEP:
        return value[:_STRING_KEEP] + f"… [{len(value) - _STRING_KEEP:,} more chars truncated]"
    if isinstance(value, list):
        kept = [_shrink_value(v) for v in value[:_LIST_KEEP]]
        if len(value) > _LIST_KEEP:
            kept.append(f"… [{len(value) - _LIST_KEEP:,} more items truncated]")
        return kept
    if isinstance(value, dict):
        return {k: _shrink_value(v) for k, v in value.items()}
    return value


def _arguments_key(raw: str) -> str | bytes:
    return raw if len(raw) <= INLINE_KEY_CHARS else text_key(raw)


def _shrunk(raw: Any) -> str | None:
    """`shrink_arguments`, kept per arguments text."""
    if not isinstance(raw, str):
        return shrink_arguments(raw)
    key = _arguments_key(raw)
    known = _ARGUMENTS.get(key)
    if known is None:
        smaller = shrink_arguments(raw)
        _ARGUMENTS.put(key, _KEEP if smaller is None else smaller)
        return smaller
    return known or None


def shrink_arguments(raw: Any) -> str | None:
    """A smaller, still valid JSON string for oversized or unparsable ``arguments``; None to keep them as they are."""
    try:
        parsed = parse_arguments(raw)
    except ValueError:
        preview = raw[:_STRING_KEEP] if isinstance(raw, str) else ""
        return json.dumps({"_unparsable_arguments": preview}, ensure_ascii=False)
    if isinstance(raw, str) and len(raw) <= ARGUMENTS_MAX_CHARS:
        return None
    return json.dumps(_shrink_value(parsed), ensure_ascii=False)


def _function(call: Any) -> Mapping[str, Any] | None:
    """A call entry's function, where both are mappings (an entry without one is kept as it is)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    return fn if isinstance(fn, Mapping) else None


def _call_shrunk(call: Any) -> str | None:
    fn = _function(call)
    return None if fn is None else _shrunk(fn.get("arguments"))


def _large(call: Any) -> bool:
    fn = _function(call)
    raw = None if fn is None else fn.get("arguments")
    return isinstance(raw, str) and len(raw) > ARGUMENTS_MAX_CHARS


def _cached_shrunk(call: Any) -> tuple[bool, str | None]:
    """Whether what pruning makes of the call's arguments is known without work, and what (None: kept)."""
    fn = _function(call)
    if fn is None:
        return True, None
    raw = fn.get("arguments")
    known = _ARGUMENTS.get(_arguments_key(raw)) if isinstance(raw, str) else None
    return (False, None) if known is None else (True, known or None)


def calls_key(message: Message) -> tuple[Any, ...] | None:
    """What pruning an assistant message's calls depends on, hashable: each call's arguments (their `text_key`;
    None for an entry without a function); None where a call's arguments are not a text (not kept)."""
    key: list[Any] = []
    for call in message.get("tool_calls") or []:
        fn = _function(call)
        if fn is None:
            key.append(None)
            continue
        raw = fn.get("arguments")
        if not isinstance(raw, str):
            return None
        key.append(text_key(raw))
    return tuple(key)


def form_key(key: tuple[Any, ...], message: Message) -> tuple[Any, ...] | None:
    """Everything the message pruning makes of ``message`` is made of: ``key`` (`line_key` or `calls_key`, what
    replaces part of it) and the rest of the message — its role, name and calls' names, and where its calls are
    what is replaced, its text and images (a result's text is in its line's key, and goes) — so a record's counts
    of that message are taken only for the message they were made from (two calls with the same arguments and
    different texts have the same `calls_key`). None for a result that also calls tools (not kept)."""
    calls = message.get("tool_calls") or []
    names = tuple(None if (fn := _function(call)) is None else fn.get("name") for call in calls)
    rest = (message.get("role"), message.get("name"), names)
    if message.get("role") == "tool":
        return None if calls else (key, rest)
    content = message.get("content")
    images = sum(1 for part in content if is_image_part(part)) if isinstance(content, list) else 0
    return key, rest, text_key(content_text(message)), images


def _adopted_arguments(message: Message, calls: Sequence[Any]) -> tuple[tuple[str | None, ...], FormCounts] | None:
    """What a prepared record says of the message's calls, where the digest of its `form_key` is the record's."""
    key = calls_key(message) if len(_ADOPTED_CALLS) else None
    form = None if key is None else form_key(key, message)
    found = None if form is None else _ADOPTED_CALLS.get(key_digest(form))
    # (Arguments only for calls that have a function to hold them: a record saying otherwise was not made here.)
    if found is None or len(found[0]) != len(calls) or any(
            arguments is not None and held is None for arguments, held in zip(found[0], key or (), strict=True)):
        return None
    return found


def _shrink_calls(message: Message) -> tuple[dict[str, Any], tuple[str | None, ...]] | None:
    """The message with its calls' arguments shrunk or repaired, and each call's new arguments (None: kept); None
    when every call keeps its arguments."""
    calls = message.get("tool_calls") or []
    known = [_cached_shrunk(call) for call in calls]
    # A record is looked for (its key digested) only where this process does not know the calls already and one
    # is large: checking small arguments (parsing them) costs less than finding their record would.
    adopted = (_adopted_arguments(message, calls)
               if any(not found and _large(call) for call, (found, _) in zip(calls, known, strict=True)) else None)
    arguments = adopted[0] if adopted is not None else [
        smaller if found else _call_shrunk(call) for call, (found, smaller) in zip(calls, known, strict=True)]
    if all(smaller is None for smaller in arguments):
        return None
    shrunk = {**message, "tool_calls": [
        call if smaller is None else {**call, "function": {**call["function"], "arguments": smaller}}
        for call, smaller in zip(calls, arguments, strict=True)]}
    if adopted is not None:
        _keep_counts(shrunk, adopted[1])
    return shrunk, tuple(arguments)


def line_key(call: Mapping[str, Any] | None, name: Any, text: str) -> tuple[Any, ...] | None:
    """What the one-liner of a result ``text`` named ``name`` and produced by ``call`` depends on, hashable (texts
    past `INLINE_KEY_CHARS` by their digest); None where a call's arguments are not a text (not kept)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    if fn and not isinstance(fn, Mapping):
        return None
    fn = fn or {}
    raw = fn.get("arguments", "{}")
    if not isinstance(raw, str):
        return None
    return (str(fn.get("name") or name or "tool"), text_key(raw), text_key(text))


def result_line(call: Mapping[str, Any] | None, name: Any, text: str) -> str:
    """`describe_tool_result`, kept per result (see the module's docstring)."""
    return _line(call, name, text)[0]


def _line(call: Mapping[str, Any] | None, name: Any, text: str,
          message: Message | None = None) -> tuple[str, FormCounts | None]:
    """`result_line`, and the counts of the pruned message where the line was just taken from a record (only
    when the result ``message`` is given)."""
    key = line_key(call, name, text)
    if key is None:
        return describe_tool_result(call, name, text), None
    line = _LINES.get(key)
    if line is not None:
        return line, None
    form = form_key(key, message) if message is not None and len(_ADOPTED_LINES) else None
    adopted = None if form is None else _ADOPTED_LINES.get(key_digest(form))
    line, counts = adopted if adopted is not None else (describe_tool_result(call, name, text), None)
    _LINES.put(key, line)
    return line, counts


def _keep_counts(message: Message, counts: FormCounts) -> None:
    """Keep what a record said of a pruned ``message``: its token count and its summary block's."""
    encoding, tokens, block_tokens, unredacted = counts
    get_counter(encoding).remember(message, tokens)
    keep_block(message, encoding, block_tokens, unredacted)


def _calls_by_id(messages: Sequence[Message]) -> dict[str, Mapping[str, Any]]:
    calls: dict[str, Mapping[str, Any]] = {}
    for message in messages:
        for call in tool_calls_of(message):
            if call.get("id"):
                calls[str(call["id"])] = call
    return calls


def remember_pruned(messages: Sequence[Message]) -> list[PrunedForm | None]:
    """Prepare what pruning makes of ``messages`` now (a caller storing messages as they come: the gateway, after
    a turn), so a later compaction only looks it up: each long result's one-liner and each call's check. Returns,
    per message, what pruning makes of it (None: nothing, or nothing that can be kept — a call's arguments that
    are not a text). A result's call is looked up among ``messages``, so pass a call with its results."""
    calls = _calls_by_id(messages)
    forms: list[PrunedForm | None] = []
    for message in messages:
        form = None
        if message.get("role") == "tool":
            text = content_text(message)
            call, name = calls.get(str(message.get("tool_call_id"))), message.get("name")
            key = line_key(call, name, text) if len(text) > PRUNE_MIN_CHARS else None
            if key is not None:
                line = result_line(call, name, text)
                form_of = form_key(key, message)
                form = None if form_of is None else PrunedForm(form_of, line, {**message, "content": line})
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            shrunk = _shrink_calls(message)
            key = calls_key(message)
            # (Only large arguments are looked up in the records: see _shrink_calls.)
            if shrunk is not None and key is not None and any(_large(call) for call in message["tool_calls"]):
                form_of = form_key(key, message)
                form = None if form_of is None else PrunedForm(form_of, shrunk[1], shrunk[0])
        forms.append(form)
    return forms


def adopt_line(digest: str, line: str, counts: FormCounts) -> None:
    """Keep a one-liner adopted from a prepared record: that of the result whose `form_key` has the `key_digest`
    ``digest``, with the ``counts`` of the message the result becomes (taken when pruning first looks it up)."""
    _ADOPTED_LINES.put(digest, (line, counts))


def adopt_arguments(digest: str, arguments: tuple[str | None, ...], counts: FormCounts) -> None:
    """Keep shrunk arguments adopted from a prepared record: each call's (None: kept as it is) of the message whose
    `form_key` has the `key_digest` ``digest``, with the ``counts`` of the message they make."""
    _ADOPTED_CALLS.put(digest, (arguments, counts))


def clear_prune_cache() -> None:
    """Forget every one-liner and check, adopted ones too (as a restarted process would have)."""
    _LINES.clear()
    _ARGUMENTS.clear()
    _ADOPTED_LINES.clear()
    _ADOPTED_CALLS.clear()


def _strip_images(content: list[Any]) -> list[Any]:
    return [{"type": "text", "text": IMAGE_PLACEHOLDER} if is_image_part(p) else p for p in content]


def prune_messages(messages: Sequence[Message], protect_from: int) -> PruneResult:
    """Apply the three pruning passes to ``messages[:protect_from]``; return a new list (inputs untouched)."""
    out: list[dict[str, Any]] = [m if isinstance(m, dict) else dict(m) for m in messages]
    protect_from = max(0, min(protect_from, len(out)))
    frozen = anchor_indices(out)
    calls = _calls_by_id(out)

    deduplicated = summarized = images = shrunk = 0
    seen: set[str] = set()
    for i in range(len(out) - 1, -1, -1):
        message = out[i]
        if message.get("role") != "tool":
            continue
        key, size = _content_key(message.get("content"))
        duplicate = key in seen
        seen.add(key)
        if i >= protect_from or i in frozen:
            continue
        if duplicate and size > PRUNE_MIN_CHARS:
            out[i] = {**message, "content": DUPLICATE_NOTE}
            deduplicated += 1
            continue
        content = message.get("content")
        text = content_text(message)
        line, counts = (
            _line(calls.get(str(message.get("tool_call_id"))), message.get("name"), text, message)
            if len(text) > PRUNE_MIN_CHARS
            else ("", None)
        )
        if line and len(line) < len(text):
            out[i] = {**message, "content": line}
            if counts is not None:
                _keep_counts(out[i], counts)
            summarized += 1
        elif isinstance(content, list) and any(is_image_part(p) for p in content):
            out[i] = {**message, "content": _strip_images(content)}
            images += 1

    for i in range(protect_from):
        if i in frozen or out[i].get("role") != "assistant" or not out[i].get("tool_calls"):
            continue
        smaller = _shrink_calls(out[i])
        if smaller is not None:
            out[i] = smaller[0]
            shrunk += 1
    return PruneResult(out, deduplicated, summarized, images, shrunk)
