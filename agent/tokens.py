"""Token accounting: exact offline tiktoken counts, cheap rough estimates, incremental ledgers.

tiktoken downloads its BPE files on first use; Concord never does. The `bpe-openai` package ships the same
files, so we decompress them into a private cache named the way tiktoken expects (sha1 of the blob URL) and
let tiktoken's own sha256 check guard them (R-T1).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tiktoken

from agent.cache_dir import cache_dir
from agent.lru import LruCache

__all__ = [
    "ENCODINGS",
    "IMAGE_TOKENS",
    "INLINE_KEY_CHARS",
    "TokenCounter",
    "TokenLedger",
    "count_key",
    "estimate_messages_tokens_rough",
    "estimate_request_tokens_rough",
    "get_counter",
    "key_digest",
    "message_text",
    "prime_tiktoken_cache",
    "text_key",
]

_BLOB_ROOT = "https://openaipublic.blob.core.windows.net/encodings/"
ENCODINGS: dict[str, str] = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}

# Flat cost of one image part: OpenAI's high-detail 1024x1024 tile price. Base64 bytes are never tokenized.
IMAGE_TOKENS = 765
# Chat framing per message (role markers, separators) and per tool call (name/id/type wrapper).
_MESSAGE_OVERHEAD = 4
_TOOL_CALL_OVERHEAD = 8
_REQUEST_OVERHEAD = 3
# Distinct tool-schema sets whose counts a counter keeps (one per configured tool set, MCP servers included).
_TOOL_SETS = 64
_ROUGH_CHARS_PER_TOKEN = 4

# Texts up to this length key the count cache themselves; longer ones by their digest.
INLINE_KEY_CHARS = 512

_prime_lock = threading.Lock()


def _default_cache_dir() -> Path:
    path = cache_dir("tiktoken")
    if path is None:  # tiktoken needs its files somewhere
        path = Path(tempfile.gettempdir()) / "concord-tiktoken"
        path.mkdir(parents=True, exist_ok=True)
    return path


def _bpe_data_dir() -> Path:
    # Locate bpe-openai's data without importing the package: its __init__ loads a 74 MB native encoder.
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the bpe-openai package (it ships tiktoken's BPE files) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def prime_tiktoken_cache(cache_dir: Path | None = None) -> Path:
    """Write the BPE files shipped by ``bpe-openai`` where tiktoken looks for them; return the cache dir.

    Idempotent: files already present with the right hash are left alone. Sets ``TIKTOKEN_CACHE_DIR``.
    """
    with _prime_lock:
        cache = Path(cache_dir) if cache_dir else Path(os.environ.get("TIKTOKEN_CACHE_DIR") or _default_cache_dir())
        cache.mkdir(parents=True, exist_ok=True)
        data = _bpe_data_dir()
        for name, sha256 in ENCODINGS.items():
            target = cache / hashlib.sha1((_BLOB_ROOT + name + ".tiktoken").encode()).hexdigest()
            if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
                continue
            raw = gzip.decompress((data / f"{name}.tiktoken.gz").read_bytes())
            if hashlib.sha256(raw).hexdigest() != sha256:
                raise RuntimeError(f"bpe-openai's {name} data does not match tiktoken's expected hash")
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(raw)
            tmp.replace(target)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        return cache


def message_text(message: Mapping[str, Any]) -> str:
    """All the text a message carries (content parts, tool-call names and arguments), images excluded."""
    chunks: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        chunks.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                chunks.append(str(part.get("text") or ""))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {} if isinstance(call, Mapping) else {}
        chunks.append(str(fn.get("name") or ""))
        chunks.append(str(fn.get("arguments") or ""))
    return "\n".join(chunks)


def _image_count(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, Mapping) and p.get("type") in ("image_url", "image"))


def text_key(text: str) -> str | bytes:
    """``text`` itself as a cache key, or past `INLINE_KEY_CHARS` a 128-bit BLAKE2b digest of it, so that a
    cache entry never pins a large tool output in memory."""
    if len(text) <= INLINE_KEY_CHARS:
        return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def key_digest(key: tuple[Any, ...], size: int = 16) -> str:
    """A stable name of a cache key made of texts, `text_key` digests, numbers, booleans, None and tuples of them
    (their ``repr`` is the same in every process and tells any two apart): its BLAKE2b digest of ``size`` bytes
    (128 bits by default) in URL-safe base64, for what a cache keeps outside the process
    (`agent.compression.prepared`)."""
    digest = hashlib.blake2b(repr(key).encode("utf-8", "surrogatepass"), digest_size=size).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def count_key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a message's token count depends on, as a hashable, collision-safe cache key.

    Role, name, tool-call and image counts, and the text's `text_key`. Hashing the text is two orders of
    magnitude cheaper than tokenizing it, and nothing is serialized.
    """
    content, calls = message.get("content"), message.get("tool_calls")
    if isinstance(content, str) and not calls:  # the common case, without building anything
        text, images = content, 0
    else:
        text, images = message_text(message), _image_count(message)
    name = message.get("name")
    return (str(message.get("role") or ""), str(name) if name else None, len(calls or ()), images, text_key(text))


class TokenCounter:
    """Exact token counts for messages, tool schemas and whole requests, with a per-message LRU cache.

    A message's count depends only on its role, name, text, number of tool calls and number of images, so
    that is the cache key (`count_key`): an unchanged message — or any copy of it, whichever list or session
    it appears in — is never re-tokenized (R-T3), and a lookup serializes nothing.
    """

    def __init__(self, encoding: str = "o200k_base", cache_size: int = 50_000) -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; allowed: {', '.join(ENCODINGS)}")
        prime_tiktoken_cache()
        self.encoding_name = encoding
        self._enc = tiktoken.get_encoding(encoding)
        self._cache: LruCache[tuple[Any, ...], int] = LruCache(cache_size)
        # Tool schemas by their JSON text: a chat sends the same few sets with every request, and tokenizing one
        # (several KB) costs far more than serializing it to look it up.
        self._tools: LruCache[str, int] = LruCache(_TOOL_SETS)

    def count_text(self, text: str) -> int:
        """Tokens in plain text (special-token strings are counted as ordinary text)."""
        return len(self._enc.encode_ordinary(text)) if text else 0

    def framing(self, message: Mapping[str, Any]) -> int:
        """What a message costs besides its text (`message_text`): framing, role, name, per-call overhead and
        images. A message's count is always its framing plus its text's count."""
        tokens = _MESSAGE_OVERHEAD + self.count_text(str(message.get("role") or ""))
        if message.get("name"):
            tokens += 1 + self.count_text(str(message["name"]))
        tokens += _TOOL_CALL_OVERHEAD * len(message.get("tool_calls") or ())
        tokens += IMAGE_TOKENS * _image_count(message)
        return tokens

    def _uncached_message(self, message: Mapping[str, Any]) -> int:
        return self.framing(message) + self.count_text(message_text(message))

    def count_message_with_text(self, message: Mapping[str, Any], text_tokens: int) -> int:
        """`count_message` of ``message`` whose text (`message_text`) the caller has just counted: ``text_tokens``
        tokens (a clipped copy, whose clipping measured it). Remembered like a counted message."""
        value = self.framing(message) + text_tokens
        self._cache.put(count_key(message), value)
        return value

    def remember(self, message: Mapping[str, Any], tokens: int) -> None:
        """Keep ``tokens`` as the count of ``message``: counted before, by this encoding (a prepared record's)."""
        self._cache.put(count_key(message), tokens)

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Exact tokens of one chat message including framing, tool calls and a flat cost per image."""
        key = count_key(message)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        value = self._uncached_message(message)
        self._cache.put(key, value)
        return value

    def count_messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Exact tokens of a message list (sum of per-message counts)."""
        return sum(self.count_message(m) for m in messages)

    def count_each(self, messages: Iterable[Mapping[str, Any]]) -> list[int]:
        """Exact tokens of every message of a list, in order."""
        listed = list(messages)
        keys = [count_key(m) for m in listed]
        counts: list[int] = []
        # One lock for the whole list (most of it is known), then what was not, each counted once.
        for message, key, known in zip(listed, keys, self._cache.get_many(keys), strict=True):
            if known is None:  # (asked again: an equal message earlier in the list may have just been counted)
                known = self._cache.get(key)
                if known is None:
                    known = self._uncached_message(message)
                    self._cache.put(key, known)
            counts.append(known)
        return counts

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Exact tokens of the tool schemas sent with a request."""
        if not tools:
            return 0
        text = json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"))
        tokens = self._tools.get(text)
        if tokens is None:
            tokens = self.count_text(text)
            self._tools.put(text, tokens)
        return tokens

    def count_request(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        message_tokens: int | None = None,
    ) -> int:
        """Exact prompt tokens of a request: system prompt + messages + tool schemas.

        ``message_tokens``: the messages' total, when the caller already holds it (a `TokenLedger`)."""
        counted = self.count_messages(messages) if message_tokens is None else message_tokens
        total = _REQUEST_OVERHEAD + counted + self.count_tools(tools)
        if system:
            total += self.count_message({"role": "system", "content": system})
        return total


_counters: dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def get_counter(encoding: str = "o200k_base") -> TokenCounter:
    """The process-wide counter for an encoding (loading a BPE table costs ~0.3 s, so share it)."""
    with _counters_lock:
        counter = _counters.get(encoding)
        if counter is None:
            counter = _counters[encoding] = TokenCounter(encoding)
        return counter


class TokenLedger:
    """Running token total of an append-only message list: each sync costs O(new messages).

    Messages are treated as immutable values. Appending to the same list object is the O(1)-checked fast
    path. Any other list (a compacted or pruned copy, a list read back from storage) must start with the
    messages the ledger counted, compared element by element in C (identity first, then equality), or the
    ledger recounts from scratch, which the per-message cache makes cheap. Replacing an element of the
    same list object in place is not detected: build a new list instead.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._source: Sequence[Mapping[str, Any]] | None = None
        self._counted: list[Mapping[str, Any]] = []
        self._counts: list[int] = []
        self.total = 0

    @property
    def counts(self) -> list[int]:
        """Per-message counts of the list last synced, in order (a copy; hand it to ``compress``)."""
        return list(self._counts)

    def seed(self, messages: Sequence[Mapping[str, Any]], counts: Sequence[int]) -> None:
        """Take counts the caller already holds for ``messages`` (the store keeps one per row), so the next
        sync of this list or one extending it tokenizes only what was appended."""
        if len(counts) != len(messages):
            raise ValueError(f"{len(messages)} messages but {len(counts)} token counts")
        self._source, self._counted, self._counts = messages, list(messages), [int(c) for c in counts]
        self.total = sum(self._counts)

    def sync(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Bring the total up to date with ``messages`` and return it."""
        seen = len(self._counted)
        appended = (
            messages is self._source
            and len(messages) >= seen
            and (seen == 0 or messages[seen - 1] is self._counted[-1])
        )
        if not appended and list(messages[:seen]) != self._counted:
            self._counted, self._counts, self.total = [], [], 0
        for message in messages[len(self._counted) :]:
            tokens = self._counter.count_message(message)
            self.total += tokens
            self._counted.append(message)
            self._counts.append(tokens)
        self._source = messages
        return self.total

    def reset(self) -> None:
        """Forget everything (the next sync recounts)."""
        self._source, self._counted, self._counts, self.total = None, [], [], 0


def estimate_messages_tokens_rough(messages: Iterable[Mapping[str, Any]]) -> int:
    """Cheap chars/4 estimate of a message list; images at a flat cost, base64 never counted."""
    chars = 0
    images = 0
    count = 0
    for message in messages:
        count += 1
        chars += len(message_text(message))
        images += _image_count(message)
    return chars // _ROUGH_CHARS_PER_TOKEN + count * _MESSAGE_OVERHEAD + images * IMAGE_TOKENS


def estimate_request_tokens_rough(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """Cheap estimate of a whole request; includes tool schemas, which alone can be 20-30K tokens (R-T2)."""
    total = estimate_messages_tokens_rough(messages) + _REQUEST_OVERHEAD
    if system:
        total += len(system) // _ROUGH_CHARS_PER_TOKEN + _MESSAGE_OVERHEAD
    if tools:
        total += len(json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"))) // _ROUGH_CHARS_PER_TOKEN
    return total
