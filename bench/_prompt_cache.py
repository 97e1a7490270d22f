"""A provider's prompt cache and its bill, modelled from the requests a server received (`bench.conversation`).

The model follows Anthropic's documented rules, applied to Messages API request bodies as Concord sent them:

* A request is a sequence of blocks in cache order: each tool definition, then the system blocks, then each
  message's content blocks. A block's identity is its content (a ``cache_control`` marker is not content)
  and everything before it, so a changed block changes every later one.
* A block carrying ``cache_control`` is a breakpoint (at most 4 a request): the prefix up to it is written to
  the cache (5 minutes, refreshed by every request that reads it).
* A request reads the longest cached prefix that ends at one of its breakpoints or up to 20 blocks before
  one (the lookback), written by an earlier request still alive.
* Billing: read tokens at the cache-read price; the tokens after them up to the last breakpoint at the
  cache-write price; the tokens after the last breakpoint (all of them, without a breakpoint) at the input
  price; the answer at the output price.

Beside that, the longest run of leading blocks any earlier live request also sent (``common_prefix``) is what
a cache with no markers at all could reuse: the gap between the two is what the markers leave on the table.
The minimum cacheable length of a prefix (1,024 tokens on Sonnet, more on other models) is not modelled.
Times are the benchmark's simulated ones, in seconds. Tokens are counted by the caller's counter (the
benchmark's own tiktoken), never by the code under test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PRICES", "Billed", "Block", "Prices", "PromptCache", "request_blocks"]

TTL_S = 300.0
LOOKBACK = 20
MAX_BREAKPOINTS = 4
_MESSAGE_FRAME = 3  # tokens a message costs beyond its text (role, separators), as the window server counts


@dataclass(frozen=True, slots=True)
class Prices:
    """Dollars per million tokens."""

    input: float = 3.0
    cache_read: float = 0.30
    cache_write: float = 3.75
    output: float = 15.0


PRICES = Prices()


@dataclass(frozen=True, slots=True)
class Block:
    """One cacheable block: the identity of the prefix through it, its tokens, whether it is a breakpoint, and
    whether it belongs to the stable prefix (a tool definition or the system prompt)."""

    key: str
    tokens: int
    breakpoint: bool
    stable: bool


@dataclass(frozen=True, slots=True)
class Billed:
    """One request's prompt as the cache saw it, in tokens."""

    prompt: int
    read: int
    written: int
    uncached: int
    output: int
    common_prefix: int
    breakpoints: int
    stable: int  # tokens of the tool definitions and the system prompt

    def dollars(self, prices: Prices = PRICES) -> float:
        """What the request costs."""
        return (self.read * prices.cache_read + self.written * prices.cache_write + self.uncached * prices.input
                + self.output * prices.output) / 1e6


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(_block_text(b) for b in content if isinstance(b, Mapping))
    return ""


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "tool_use":
        return f"{block.get('name')}{json.dumps(block.get('input'), sort_keys=True)}"
    if kind == "tool_result":
        return _text(block.get("content"))
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


def _content(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, Mapping)]


def request_blocks(body: Mapping[str, Any], count: Callable[[str], int]) -> list[Block]:
    """An Anthropic Messages request body as blocks in cache order, counted with ``count``."""
    parts: list[tuple[str, Mapping[str, Any], int]] = []
    for tool in body.get("tools") or ():
        parts.append(("tool", tool, count(json.dumps({k: v for k, v in tool.items() if k != "cache_control"},
                                                     sort_keys=True))))
    for block in _content(body.get("system")):
        parts.append(("system", block, count(_block_text(block))))
    for message in body.get("messages") or ():
        for index, block in enumerate(_content(message.get("content"))):
            frame = _MESSAGE_FRAME if index == 0 else 0
            parts.append((f"{message.get('role')}:{index}", block, frame + count(_block_text(block))))
    blocks: list[Block] = []
    key = ""
    for where, block, tokens in parts:
        content = json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)
        key = hashlib.blake2b(f"{key}|{where}|{content}".encode(), digest_size=16).hexdigest()
        blocks.append(Block(key, tokens, "cache_control" in block, where in ("tool", "system")))
    return blocks


class PromptCache:
    """The cache of one conversation's requests, billed one after the other (see the module docstring)."""

    def __init__(self, ttl_s: float = TTL_S, lookback: int = LOOKBACK) -> None:
        self.ttl_s = ttl_s
        self.lookback = lookback
        self._written: dict[str, float] = {}  # prefix key → expiry, for prefixes ending at a breakpoint
        self._sent: dict[str, float] = {}  # every prefix any request sent → expiry (the marker-free view)

    def bill(self, blocks: Sequence[Block], output_tokens: int, at: float) -> Billed:
        """Bill a request of ``blocks`` sent at ``at`` (seconds), and update the cache with it."""
        ends = [0]
        for block in blocks:
            ends.append(ends[-1] + block.tokens)
        breakpoints = [i for i, b in enumerate(blocks) if b.breakpoint]
        hit = -1
        for point in breakpoints:
            for j in range(point, max(-1, point - self.lookback - 1), -1):
                if self._written.get(blocks[j].key, -1.0) >= at:
                    hit = max(hit, j)
                    break
        common = next((i for i in range(len(blocks) - 1, -1, -1) if self._sent.get(blocks[i].key, -1.0) >= at), -1)
        read = ends[hit + 1]
        last = breakpoints[-1] if breakpoints else -1
        written = ends[last + 1] - read if last > hit else 0
        for j in [*breakpoints, *([hit] if hit >= 0 else [])]:
            self._written[blocks[j].key] = at + self.ttl_s
        for block in blocks:
            self._sent[block.key] = at + self.ttl_s
        return Billed(prompt=ends[-1], read=read, written=written, uncached=ends[-1] - read - written,
                      output=output_tokens, common_prefix=ends[common + 1], breakpoints=len(breakpoints),
                      stable=sum(b.tokens for b in blocks if b.stable))
