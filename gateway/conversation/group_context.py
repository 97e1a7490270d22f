"""Unaddressed group lines kept in memory for the next question (``gateway.group_history: addressed``)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

from gateway.intake.keys import SessionKey

__all__ = ["GroupContext"]


class GroupContext:
    """Unaddressed group lines per session: the newest ``limit`` of each, at most ``max_chars`` in all (they go
    in front of one question, and long chatter must not fill the model's window), for at most
    ``max_sessions``."""

    def __init__(self, limit: int, max_sessions: int = 10_000, max_chars: int = 16_000) -> None:
        self.limit = limit
        self.max_sessions = max_sessions
        self.max_chars = max_chars
        self._lines: OrderedDict[SessionKey, deque[str]] = OrderedDict()

    def add(self, key: SessionKey, line: str) -> None:
        """Keep ``line``; the oldest line of the session falls out past the limit."""
        if self.limit <= 0:
            return
        lines = self._lines.get(key)
        if lines is None:
            lines = self._lines[key] = deque(maxlen=self.limit)
        lines.append(line if len(line) <= self.max_chars else line[: self.max_chars - 1] + "…")
        while len(lines) > 1 and sum(map(len, lines)) > self.max_chars:
            lines.popleft()
        self._lines.move_to_end(key)
        while len(self._lines) > self.max_sessions:
            self._lines.popitem(last=False)

    def take(self, key: SessionKey) -> list[str]:
        """The kept lines of ``key`` (oldest first), forgetting them."""
        return list(self._lines.pop(key, ()))

    def drop(self, key: SessionKey, unwanted: Callable[[str], bool]) -> None:
        """Forget the kept lines of ``key`` that ``unwanted`` picks (a deleted message's)."""
        lines = self._lines.get(key)
        if lines is not None:
            kept = [line for line in lines if not unwanted(line)]
            lines.clear()
            lines.extend(kept)
