"""How large a request is, as the server will count it (R-P1, R-T3).

The server counts with its own tokenizer and chat template. So a request's size is the server's own figure
for the part it already measured (the last request, anchored by `FitAnchor`) plus an exact count of what was
added since — scaled by what the server counted, so far, for each token of ours (`CountRatio`) — and, when
there is no anchor, an exact count of the whole request. Every message is counted once (`TokenLedger`).
The same usage reports show a server that silently truncates (`TruncationWatch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.llm.base import Usage
from agent.llm.window import TruncationWatch
from agent.tokens import TokenCounter, TokenLedger
from agent.triggers import CountRatio, FitAnchor

__all__ = ["RequestMeter"]

Messages = Sequence[Mapping[str, Any]]


class RequestMeter:
    """The sizes of one session's requests; one per agent loop (its anchor follows the loop's list)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.ledger = TokenLedger(counter)
        self._anchor: FitAnchor | None = None
        self._ratio = CountRatio()
        self._truncation = TruncationWatch()

    @property
    def ratio(self) -> float:
        """The server's tokens per token of ours, as learned so far (1.0 until it counted more)."""
        return self._ratio.value

    def anchored(self, messages: Messages, system: str) -> int | None:
        """The server's figure for the measured request plus what came after, in its units; None when
        ``messages`` no longer extends the measured request (a compaction or an edit replaced it)."""
        if self._anchor is None:
            return None
        return self._anchor.estimate(messages, system, self.counter, self._ratio.value)

    def exact(self, messages: Messages, system: str, schemas: Sequence[Mapping[str, Any]]) -> int:
        """Our exact count of the whole request: system prompt, messages and tool schemas."""
        return self.counter.count_request(messages, system=system, tools=schemas,
                                          message_tokens=self.ledger.sync(messages))

    def request(self, messages: Messages, system: str, schemas: Sequence[Mapping[str, Any]]) -> int:
        """The request's size: anchored when the server measured a prefix of it, else exact."""
        anchored = self.anchored(messages, system)
        return anchored if anchored is not None else self.exact(messages, system, schemas)

    def record(self, usage: Usage, sent: Messages, system: str, schemas: Sequence[Mapping[str, Any]],
               threshold: int) -> int | None:
        """Learn from the server's usage of the request ``sent``: the ratio of its counts to ours, a new
        anchor (while below ``threshold``), and the window it must be serving when it truncates silently
        (returned; None otherwise). The exact count that takes is made only for a report that could be one."""
        watch = self._truncation
        sent_tokens = self.exact(sent, system, schemas) if watch.plausible(usage.prompt_tokens) else 0
        served = watch.observe(sent_tokens, usage.prompt_tokens)
        if self._anchor is not None and usage.prompt_tokens > 0:
            grown = self._anchor.appended(sent, system, self.counter)
            if grown is not None:
                self._ratio.observe(usage.prompt_tokens - self._anchor.prompt_tokens, grown)
        if 0 < usage.prompt_tokens < threshold:
            self._anchor = FitAnchor.of(usage.prompt_tokens, sent, system)
        elif usage.prompt_tokens:
            self._anchor = None
        return served

    def forget_anchor(self) -> None:
        """The list was replaced (a compaction): nothing of it is measured any more."""
        self._anchor = None
