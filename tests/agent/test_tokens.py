"""agent.tokens: offline priming (R-T1), message counting, rough estimates (R-T2), caching and the
incremental ledger (R-T3)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from agent import tokens
from agent.tokens import (
    ENCODINGS,
    IMAGE_TOKENS,
    TokenCounter,
    TokenLedger,
    estimate_messages_tokens_rough,
    estimate_request_tokens_rough,
    get_counter,
    message_text,
    prime_tiktoken_cache,
)

_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


class DownloadAttempted(Exception):
    """Raised in place of tiktoken's network fetch."""


def _cache_file(cache: Path, encoding: str) -> Path:
    return cache / hashlib.sha1(_URL.format(encoding).encode()).hexdigest()


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty TIKTOKEN_CACHE_DIR, no loaded encodings, and any download attempt raising."""

    def no_download(blobpath: str) -> bytes:
        raise DownloadAttempted(blobpath)

    cache = tmp_path / "tiktoken-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tiktoken.load, "read_file", no_download)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    return cache


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Callable[[TokenCounter], list[str]]:
    """Wrap a counter's tokenizer entry point; the returned list records every text it tokenizes."""

    def wrap(counter: TokenCounter) -> list[str]:
        calls: list[str] = []
        real = counter.count_text

        def spy(text: str) -> int:
            calls.append(text)
            return real(text)

        monkeypatch.setattr(counter, "count_text", spy)
        return calls

    return wrap


def _msgs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message number {i} " * 3}
            for i in range(start, start + n)]


# ----------------------------------------------------------------------------------------- offline priming


def test_priming_a_fresh_dir_loads_both_encodings_without_download(offline: Path) -> None:
    assert not offline.exists()
    counters = {name: TokenCounter(name) for name in ENCODINGS}
    for name, sha256 in ENCODINGS.items():
        assert hashlib.sha256(_cache_file(offline, name).read_bytes()).hexdigest() == sha256
        assert counters[name].count_text("hello world") == 2


def test_priming_is_idempotent_and_leaves_good_files_alone(offline: Path) -> None:
    prime_tiktoken_cache(offline)
    target = _cache_file(offline, "o200k_base")
    before = target.stat().st_mtime_ns
    assert prime_tiktoken_cache(offline) == offline
    assert target.stat().st_mtime_ns == before


def test_corrupted_cache_file_is_rejected_by_tiktoken_and_repaired_by_repriming(offline: Path) -> None:
    prime_tiktoken_cache(offline)
    target = _cache_file(offline, "o200k_base")
    target.write_bytes(target.read_bytes() + b"x")
    # tiktoken's own hash check throws the file away and would download it: proof the check still applies.
    with pytest.raises(DownloadAttempted):
        tiktoken.get_encoding("o200k_base")
    assert TokenCounter("o200k_base").count_text("hello world") == 2  # re-primes from bpe-openai
    target.write_bytes(b"garbage")
    prime_tiktoken_cache(offline)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == ENCODINGS["o200k_base"]


def test_bundled_data_with_wrong_hash_is_refused(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tokens.ENCODINGS, "cl100k_base", "0" * 64)
    with pytest.raises(RuntimeError, match="does not match"):
        prime_tiktoken_cache(offline)
    assert not _cache_file(offline, "cl100k_base").exists()


# ----------------------------------------------------------------------------------------- exact counts


def test_encodings_selectable_and_match_tiktoken() -> None:
    text = "Context compression: 上下文压缩 keeps {\"json\": [1, 2, 3]} intact."
    o200k, cl100k = get_counter("o200k_base"), get_counter("cl100k_base")
    assert (o200k.encoding_name, cl100k.encoding_name) == ("o200k_base", "cl100k_base")
    for counter in (o200k, cl100k):
        assert counter.count_text(text) == len(tiktoken.get_encoding(counter.encoding_name).encode(text))
    assert o200k.count_text(text) != cl100k.count_text(text)
    assert get_counter("cl100k_base") is cl100k


def test_unknown_encoding_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown encoding 'p50k_base'.*o200k_base, cl100k_base"):
        TokenCounter("p50k_base")


def test_special_token_text_counts_as_ordinary_text() -> None:
    counter = get_counter()
    assert counter.count_text("<|endoftext|>") > 1
    assert counter.count_text("") == 0


def test_message_count_includes_role_name_and_framing() -> None:
    counter = get_counter()
    plain = {"role": "user", "content": "How many tokens is this?"}
    expected = 4 + counter.count_text("user") + counter.count_text(plain["content"])
    assert counter.count_message(plain) == expected
    named = {**plain, "name": "alice_01"}
    assert counter.count_message(named) == expected + 1 + counter.count_text("alice_01")


def test_tool_calls_count_names_arguments_and_per_call_overhead() -> None:
    counter = get_counter()
    args = json.dumps({"path": "/etc/hosts", "lines": [1, 2, 3]})
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": args}}
    one = {"role": "assistant", "content": None, "tool_calls": [call]}
    two = {**one, "tool_calls": [call, {**call, "id": "c2"}]}
    bare = counter.count_message({"role": "assistant", "content": None})
    assert counter.count_message(one) == bare + counter.count_text(f"read_file\n{args}") + 8
    assert counter.count_message(two) == bare + counter.count_text(f"read_file\n{args}\nread_file\n{args}") + 16
    assert "read_file" in message_text(one) and args in message_text(one)


def test_images_cost_a_flat_amount_whatever_their_size() -> None:
    counter = get_counter()

    def with_image(url: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                            {"type": "image_url", "image_url": {"url": url}}]}

    small = counter.count_message(with_image("https://example.com/a.png"))
    huge = counter.count_message(with_image("data:image/png;base64," + "A" * 200_000))
    text_only = counter.count_message({"role": "user", "content": [{"type": "text", "text": "what is this?"}]})
    assert small == huge == text_only + IMAGE_TOKENS
    assert "AAAA" not in message_text(with_image("data:image/png;base64,AAAA"))


def test_request_count_adds_system_tools_and_overhead() -> None:
    counter = get_counter()
    messages = _msgs(3)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    base = counter.count_request(messages)
    assert base == counter.count_messages(messages) + 3
    assert counter.count_request(messages, tools=tools) == base + counter.count_tools(tools) > base
    assert counter.count_request(messages, system="Be brief.") == base + counter.count_message(
        {"role": "system", "content": "Be brief."})
    assert counter.count_tools(None) == counter.count_tools([]) == 0


def test_a_tool_schema_set_is_tokenized_once_and_counted_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 20,
                                               "parameters": {"type": "object"}}} for i in range(8)]
    exact = counter.count_text(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    tokenized: list[str] = []
    original = counter.count_text
    monkeypatch.setattr(counter, "count_text", lambda text: tokenized.append(text) or original(text))
    assert counter.count_tools(tools) == counter.count_tools([dict(t) for t in tools]) == exact
    assert len(tokenized) == 1
    changed = [*tools[:-1], {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
    assert counter.count_tools(changed) == original(json.dumps(changed, ensure_ascii=False, separators=(",", ":")))
    assert len(tokenized) == 2


# ----------------------------------------------------------------------------------------- cache


def test_count_message_is_cached_by_content(counted: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = counted(counter)
    message = {"role": "user", "content": "cache me if you can", "name": "bob"}
    first = counter.count_message(message)
    tokenized = len(calls)
    assert tokenized > 0
    assert counter.count_message(message) == first
    assert counter.count_message(dict(reversed(message.items()))) == first  # an equal copy is a hit too
    assert len(calls) == tokenized
    counter.count_message({**message, "content": "changed"})
    assert len(calls) > tokenized


def test_cache_is_bounded_lru(counted: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter(cache_size=2)
    calls = counted(counter)
    a, b, c = _msgs(3)
    for message in (a, b, a, c):  # touching a again makes b the oldest
        counter.count_message(message)
    before = len(calls)
    counter.count_message(a)
    assert len(calls) == before
    counter.count_message(b)
    assert len(calls) > before


# ----------------------------------------------------------------------------------------- ledger


def test_ledger_sync_costs_only_new_messages(counted: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = counted(counter)
    ledger = TokenLedger(counter)
    history = _msgs(1000)
    assert ledger.sync(history) == counter.count_messages(history)
    calls.clear()
    assert ledger.sync(history) == ledger.total
    assert calls == []
    history.append({"role": "user", "content": "one more turn"})
    assert ledger.sync(history) == counter.count_messages(history)
    assert calls == ["user", "one more turn"]


def test_ledger_recounts_when_the_list_is_replaced() -> None:
    counter = get_counter()
    ledger = TokenLedger(counter)
    history = _msgs(50)
    ledger.sync(history)
    compacted = [history[0], {"role": "user", "content": "[summary of turns 1-40]"}, *history[41:]]
    assert ledger.sync(compacted) == counter.count_messages(compacted)
    grown = [*compacted, *_msgs(60, start=100)]  # a new, longer list: compare contents, not just length
    assert ledger.sync(grown) == counter.count_messages(grown)
    assert ledger.sync([]) == 0


def test_ledger_notices_a_pruned_copy_that_keeps_the_last_message() -> None:
    counter = get_counter()
    ledger = TokenLedger(counter)
    history = _msgs(30)
    ledger.sync(history)
    # Pruning old tool output builds new dicts in the middle but keeps the tail objects (R-C1).
    pruned = [*history[:5], *({**m, "content": "[old output cleared]"} for m in history[5:20]), *history[20:]]
    assert pruned[-1] is history[-1] and len(pruned) == len(history)
    assert ledger.sync(pruned) == counter.count_messages(pruned) < counter.count_messages(history)


def test_ledger_accepts_an_equal_copy_without_recounting(counted: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = counted(counter)
    ledger = TokenLedger(counter)
    history = _msgs(20)
    ledger.sync(history)
    calls.clear()
    reloaded = [dict(m) for m in history] + [{"role": "user", "content": "new"}]  # e.g. read back from the store
    assert ledger.sync(reloaded) == counter.count_messages(reloaded)
    assert calls == ["user", "new"]
    ledger.reset()
    assert ledger.total == 0
    assert ledger.sync(reloaded) == counter.count_messages(reloaded)


# ----------------------------------------------------------------------------------------- rough estimates


def test_rough_estimate_is_chars_over_four_plus_framing_and_images() -> None:
    messages = [{"role": "user", "content": "x" * 400},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:," + "A" * 9999}}]}]
    assert estimate_messages_tokens_rough(messages) == 100 + 2 * 4 + IMAGE_TOKENS
    assert estimate_messages_tokens_rough(iter(messages)) == estimate_messages_tokens_rough(messages)


def test_rough_request_estimate_includes_tool_schemas_and_system() -> None:
    messages = _msgs(4)
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 80}
                                               for i in range(10)}}
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": schema}} for i in range(50)]
    bare = estimate_request_tokens_rough(messages)
    with_tools = estimate_request_tokens_rough(messages, tools=tools)
    tools_chars = len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    assert with_tools - bare == tools_chars // 4 > 10_000
    assert estimate_request_tokens_rough(messages, system="s" * 40) == bare + 10 + 4
    # The exact count agrees the schemas are the bulk of the request.
    assert get_counter().count_request(messages, tools=tools) > 5 * get_counter().count_request(messages)
