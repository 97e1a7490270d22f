"""A bounded, thread-safe least-recently-used map: the per-message caches (token counts, facts, summary
blocks) use it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LruCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``size`` entries; a lookup makes its entry the newest, and a store past the size drops the
    oldest. Safe to share between threads (compactions may run in a worker thread).

    With ``weigh``, the entries' weights (say, a text's length) are also kept at most ``budget`` together,
    the oldest dropped first, so a cache of texts is bounded in memory rather than in entries alone; an entry
    heavier than the whole budget is not stored."""

    def __init__(self, size: int, *, weigh: Callable[[V], int] | None = None, budget: int = 0) -> None:
        if size <= 0:
            raise ValueError("size must be positive")
        if weigh is not None and budget <= 0:
            raise ValueError("a weighed cache needs a positive budget")
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._size = size
        self._weigh = weigh
        self._budget = budget
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value stored under ``key``, or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def get_many(self, keys: list[K]) -> list[V | None]:
        """`get` of each key, in order, under one acquisition of the lock (a caller looking up a whole list)."""
        with self._lock:
            entries, found = self._entries, []
            for key in keys:
                value = entries.get(key)
                if value is not None:
                    entries.move_to_end(key)
                found.append(value)
            return found

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` as the newest entry."""
        with self._lock:
            if self._weigh is None:
                self._entries[key] = value
                self._entries.move_to_end(key)
                if len(self._entries) > self._size:
                    self._entries.popitem(last=False)
                return
            weight = self._weigh(value)
            if weight > self._budget:
                return
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= self._weigh(old)
            self._entries[key] = value
            self._weight += weight
            while len(self._entries) > self._size or self._weight > self._budget:
                self._weight -= self._weigh(self._entries.popitem(last=False)[1])

    def clear(self) -> None:
        """Forget everything (as a restarted process would have)."""
        with self._lock:
            self._entries.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._entries)
