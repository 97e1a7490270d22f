"""The agent loop's working state of one turn (`Turn`) and the exception that ends a turn with an error text
(`Stop`); `agent.turn.TurnResult` is the frozen view the loop hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.llm.base import Usage
from agent.storable import storable
from agent.turn import Compaction

__all__ = ["Stop", "Turn"]


class Stop(Exception):
    """End the turn with a user-facing error text (``notified``: the user has already been shown it)."""

    def __init__(self, text: str, *, notified: bool = False) -> None:
        super().__init__(text)
        self.text = text
        self.notified = notified


@dataclass
class Turn:
    """Mutable working state of one turn (the loop's own; `TurnResult` is the frozen view of it)."""

    messages: list[dict[str, Any]]
    max_tokens: int | None
    appended: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)
    compressions_used: int = 0
    output_shrinks: int = 0
    images_shrunk: int = 0
    told_compacting: bool = False
    told_aborted: bool = False
    # The streamed text of the model call in progress ("" between calls).
    partial: str = ""

    def append(self, message: dict[str, Any]) -> None:
        # Everything a turn adds (the user's message, the model's answers, tool results) enters here.
        message = storable(message)
        self.messages.append(message)
        self.appended.append(message)
