"""A message's block of the summary prompt — serialized, redacted (`serialize_message`) and counted — kept
per message, as its token count and its facts are.

A block depends only on the message's role, name, text, whether it carries an image and its calls' names and
arguments, so that is the cache key (texts past `INLINE_KEY_CHARS` by their digest, as the token counter
keys them): the same message, in whichever list, is serialized, redacted and tokenized once. The gateway
hands every message it stores to the engine once the answer is sent (`ContextEngine.on_messages_stored`),
which prepares its block then, so the compaction that later summarizes the message only looks it up; a
second summary of the same messages (a retry after a failed call, parts re-split for a smaller summary
window) does too.

The cache is bounded in entries and in characters: a block is at most a few thousand characters (long texts
and arguments are cut to their head and tail), and the least recently used go first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.messages import Message, content_text, has_image, tool_calls_of
from agent.compression.summary import serialize_message
from agent.lru import LruCache
from agent.tokens import TokenCounter, text_key

__all__ = ["BLOCK_CACHE_CHARS", "BLOCK_CACHE_ENTRIES", "block_key", "clear_block_cache", "remember_blocks",
           "summary_block"]

BLOCK_CACHE_ENTRIES = 50_000
BLOCK_CACHE_CHARS = 24_000_000

Block = tuple[str, int]

_CACHE: LruCache[tuple[Any, ...], Block] = LruCache(BLOCK_CACHE_ENTRIES, weigh=lambda block: len(block[0]),
                                                    budget=BLOCK_CACHE_CHARS)


def block_key(message: Message, encoding: str) -> tuple[Any, ...]:
    """What ``serialize_message(message)`` and the block's count under ``encoding`` depend on, hashable."""
    name, content = message.get("name"), message.get("content")
    if isinstance(content, str):  # the common case, without the general helpers' work
        text, image = content, False
    else:
        text, image = content_text(message), has_image(message)
    calls: tuple[tuple[str, str | bytes], ...] = ()
    if message.get("tool_calls"):
        fns: list[Mapping[str, Any]] = [call.get("function") or {} for call in tool_calls_of(message)]
        calls = tuple((str(fn.get("name", "?")), text_key(str(fn.get("arguments") or ""))) for fn in fns)
    return (encoding, str(message.get("role") or "unknown"), str(name) if name else None, text_key(text), image,
            calls)


def summary_block(message: Message, counter: TokenCounter) -> Block:
    """``message`` as the summary model reads it (`serialize_message`) and that text's token count."""
    key = block_key(message, counter.encoding_name)
    block = _CACHE.get(key)
    if block is None:
        text = serialize_message(message)
        block = (text, counter.count_text(text))
        _CACHE.put(key, block)
    return block


def remember_blocks(messages: Sequence[Message], counter: TokenCounter) -> None:
    """Prepare the blocks of ``messages`` now (a caller storing messages as they come: the gateway, after a
    turn), so a later compaction only looks them up."""
    for message in messages:
        summary_block(message, counter)


def clear_block_cache() -> None:
    """Forget every block (as a restarted process would have)."""
    _CACHE.clear()
