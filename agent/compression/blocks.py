"""A message's block of the summary prompt — serialized, redacted (`serialize_message`) and counted — kept
per message, as its token count and its facts are.

A block depends only on the message's role, name, text, whether it carries an image and its calls' names and
arguments, so that is the cache key (texts past `INLINE_KEY_CHARS` by their digest, as the token counter
keys them): the same message, in whichever list, is serialized, redacted and tokenized once. The gateway
hands every message it stores to the engine once the answer is sent (`ContextEngine.on_messages_stored`),
which prepares its block then, so the compaction that later summarizes the message only looks it up; a
second summary of the same messages (a retry after a failed call, parts re-split for a smaller summary
window) does too. After a restart, the records the caller stored with the messages bring the blocks' counts
back (`agent.compression.prepared`, `adopt_block`), and a block is rebuilt from its message when it is first
asked for, without tokenizing it.

The cache is bounded in entries and in characters: a block is at most a few thousand characters (long texts
and arguments are cut to their head and tail), and the least recently used go first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.messages import Message, content_text, has_image, tool_calls_of
from agent.compression.summary import serialize_message, serialize_unredacted
from agent.lru import LruCache
from agent.tokens import TokenCounter, key_digest, text_key

__all__ = ["BLOCK_CACHE_CHARS", "BLOCK_CACHE_ENTRIES", "Block", "adopt_block", "block_key", "clear_block_cache",
           "keep_block", "remember_blocks", "summary_block"]

BLOCK_CACHE_ENTRIES = 50_000
BLOCK_CACHE_CHARS = 24_000_000

Block = tuple[str, int]

_CACHE: LruCache[tuple[Any, ...], Block] = LruCache(BLOCK_CACHE_ENTRIES, weigh=lambda block: len(block[0]),
                                                    budget=BLOCK_CACHE_CHARS)
# Blocks adopted from prepared records, by the `key_digest` of the key they were made under: their count, and
# whether their text is the message's `serialize_unredacted` (else its `serialize_message`). A message whose key
# has that digest takes its block from here when it is first looked up: only the blocks a compaction reads are
# checked (their keys digested) and rebuilt.
_ADOPTED: LruCache[str, tuple[int, bool]] = LruCache(BLOCK_CACHE_ENTRIES)


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
    return _keyed_block(message, counter)[1]


def _keyed_block(message: Message, counter: TokenCounter) -> tuple[tuple[Any, ...], Block]:
    key = block_key(message, counter.encoding_name)
    block = _CACHE.get(key)
    if block is None:
        block = _adopted(message, key)
        if block is None:
            text = serialize_message(message)
            block = (text, counter.count_text(text))
        _CACHE.put(key, block)
    return key, block


def _adopted(message: Message, key: tuple[Any, ...]) -> Block | None:
    found = _ADOPTED.get(key_digest(key)) if len(_ADOPTED) else None
    if found is None:
        return None
    return _rebuilt(message, *found)


def _rebuilt(message: Message, tokens: int, unredacted: bool) -> Block:
    """The block of ``message`` that a record says is ``tokens`` long: its text serialized again, redacted only
    where the record says redaction changed it."""
    return serialize_unredacted(message) if unredacted else serialize_message(message), tokens


def remember_blocks(messages: Sequence[Message], counter: TokenCounter) -> list[tuple[tuple[Any, ...], Block]]:
    """Prepare the blocks of ``messages`` now (a caller storing messages as they come: the gateway, after a
    turn), so a later compaction only looks them up; returns each message's `block_key` and block."""
    return [_keyed_block(message, counter) for message in messages]


def adopt_block(digest: str, tokens: int, unredacted: bool) -> None:
    """Keep a block adopted from a prepared record: that of the message whose `block_key` has the `key_digest`
    ``digest``, ``tokens`` long, its text the message's `serialize_unredacted` where ``unredacted``, else its
    `serialize_message` (taken when the message is first looked up, see `_ADOPTED`)."""
    _ADOPTED.put(digest, (tokens, unredacted))


def keep_block(message: Message, encoding: str, tokens: int, unredacted: bool) -> None:
    """Keep the block of ``message`` whose count under ``encoding`` a prepared record gave (``tokens``; its text the
    message's `serialize_unredacted` where ``unredacted``, else its `serialize_message`): a message the compaction
    has just made from a record's text (a pruned result's one-liner), so no digest is checked."""
    _CACHE.put(block_key(message, encoding), _rebuilt(message, tokens, unredacted))


def clear_block_cache() -> None:
    """Forget every block, adopted ones too (as a restarted process would have)."""
    _CACHE.clear()
    _ADOPTED.clear()
