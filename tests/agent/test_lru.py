"""The bounded LRU map behind the per-message caches."""

from __future__ import annotations

import pytest

from agent.lru import LruCache


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "b" is now the oldest
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_a_weighed_cache_keeps_its_entries_within_the_budget_oldest_dropped_first() -> None:
    cache: LruCache[str, str] = LruCache(100, weigh=len, budget=10)
    cache.put("a", "xxxx")
    cache.put("b", "yyyy")
    cache.get("a")  # "b" is now the oldest
    cache.put("c", "zzzz")  # 12 characters: one entry must go
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("xxxx", None, "zzzz")
    cache.put("a", "x")  # replacing an entry gives its weight back
    cache.put("d", "wwwww")
    assert len(cache) == 3 and cache.get("c") == "zzzz"


def test_a_weighed_cache_skips_an_entry_heavier_than_the_whole_budget_and_forgets_on_clear() -> None:
    cache: LruCache[str, str] = LruCache(100, weigh=len, budget=10)
    cache.put("a", "small")
    cache.put("huge", "h" * 11)
    assert cache.get("huge") is None and cache.get("a") == "small"
    cache.clear()
    cache.put("b", "b" * 10)
    assert cache.get("b") == "b" * 10


def test_a_weighed_cache_needs_a_budget() -> None:
    with pytest.raises(ValueError):
        LruCache(10, weigh=len)


def test_looking_up_many_keys_is_looking_up_each_in_turn() -> None:
    cache: LruCache[str, int] = LruCache(3)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        cache.put(key, value)
    assert cache.get_many(["b", "x", "a"]) == [2, None, 1]  # "c" is now the oldest, then "b", then "a"
    cache.put("d", 4)
    assert (cache.get("c"), cache.get("b"), cache.get("a"), cache.get("d")) == (None, 2, 1, 4)
