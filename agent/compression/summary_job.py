"""One compaction's summary: its prompts, part by part, each within the summary model's window (R-C3, R-C9).

`SummaryJob` holds what every prompt of one compaction shares (the budget the prompt asks for, the focus,
the template, the window) and splits the middle into parts that fit beside the prompt's frame, the previous
summary a part carries and the answer's ``max_tokens`` — the guard every summary request passes.
`summarize_in_parts` makes the calls one after the other through the failure tree of `request_summary`,
each part updating the summary of the ones before it; the last one's summary covers the whole middle.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compression.fallback import build_static_summary
from agent.compression.parts import SummaryParts, serialize_parts
from agent.compression.shorten import shorten_summary
from agent.compression.state import CompressorState
from agent.compression.summarizer import SummaryOutcome, request_summary
from agent.compression.summary import SUMMARIZER_SYSTEM, build_summary_prompt
from agent.compression.threshold import request_room, summary_output_cap
from agent.llm.base import Provider
from agent.tokens import TokenCounter

__all__ = ["SummaryJob", "summarize_in_parts"]

# Chat framing tokens around the summary request's two messages.
_FRAMING = 16
# A part of the middle smaller than this cannot be summarized usefully: the summary window is too small.
MIN_PART_TOKENS = 256

Messages = Sequence[dict[str, Any]]


class NoRoom(Exception):
    """The summary window cannot hold even a part of the middle beside the prompt and its answer."""


@dataclass(frozen=True)
class SummaryJob:
    """The summary of one compaction's ``middle``: ``budget`` tokens asked for, within ``window``."""

    middle: Messages
    budget: int
    window: int
    focus: str
    auto_focus: bool
    previous: str | None
    today: datetime.date
    kind: str
    counter: TokenCounter
    # What `frame_tokens` counted, by the previous summary a part carries: the split and the first part's request
    # ask for the same frame, a few thousand characters of template.
    _frames: dict[str | None, int] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def max_tokens(self) -> int:
        """What each call may answer: the target and a quarter more (`summary_output_cap`)."""
        return summary_output_cap(self.budget)

    def prompt(self, middle_text: str, previous: str | None) -> str:
        """The user prompt for one part."""
        return build_summary_prompt(middle_text, budget=self.budget, today=self.today, previous_summary=previous,
                                    focus_topic=self.focus, auto_focus=self.auto_focus, kind=self.kind)

    def frame_tokens(self, previous: str | None) -> int:
        """The tokens of a request without its part: the prompt's frame carrying ``previous``, the system prompt
        and the chat framing (counted once per job and previous summary)."""
        tokens = self._frames.get(previous)
        if tokens is None:
            tokens = self._frames[previous] = (self.counter.count_text(self.prompt("", previous))
                                               + self.counter.count_text(SUMMARIZER_SYSTEM) + _FRAMING)
        return tokens

    def split(self) -> tuple[SummaryParts, str | None]:
        """The middle in parts that fit, and the previous summary the first part carries: the one given, or —
        for the oldest messages no part can hold — a static summary of them that includes it."""
        previous_tokens = self.counter.count_text(self.previous) if self.previous else 0
        # A part after the first carries the summary of the parts before it, at most max_tokens long.
        limit = (request_room(self.window, self.frame_tokens(None) + max(previous_tokens, self.max_tokens))
                 - self.max_tokens)
        if limit < MIN_PART_TOKENS:
            return SummaryParts((), (), len(self.middle)), self.previous
        parts = serialize_parts(self.middle, limit, self.counter)
        if not parts.older:
            return parts, self.previous
        seed = build_static_summary(self.middle[: parts.older], today=self.today, previous_summary=self.previous)
        return parts, shorten_summary(seed, max(self.budget, previous_tokens), self.counter)

    def request(self, part: str, part_tokens: int, previous: str | None) -> tuple[str, int]:
        """(prompt, max_tokens) of one part: prompt and answer within the window (the guard).

        The part is the prompt's last text (``prompt(part) == prompt("") + part``), so the prompt's size is its
        frame's count plus the part's blocks' counts — never a second tokenization of the whole prompt. That
        sum is a hair above the exact count (a separator may merge with its neighbour): it errs on fitting."""
        tokens = self.frame_tokens(previous) + part_tokens
        return self.prompt("", previous) + part, max(1, min(self.max_tokens, request_room(self.window, tokens)))


async def summarize_in_parts(
    job: SummaryJob,
    state: CompressorState,
    *,
    summary_provider: Provider | None,
    main_provider: Provider | None,
    now: Callable[[], float],
    force: bool,
    abort_on_failure: bool,
    deadline_s: float | None,
) -> SummaryOutcome:
    """The summary of ``job.middle``: one `request_summary` per part (the middle is split only when the first
    call is really made), every part within ``deadline_s`` together. A failed part fails the whole."""
    ends = None if deadline_s is None else time.monotonic() + deadline_s
    carried: dict[str, Any] = {}

    def build(index: int) -> tuple[str, int]:
        if index == 0:
            carried["parts"], carried["previous"] = job.split()
        parts: SummaryParts = carried["parts"]
        if not parts.count:
            raise NoRoom(f"the summary model's window ({job.window:,} tokens) cannot hold a part of the middle")
        return job.request(parts.parts[index], parts.tokens[index], carried["previous"])

    index = 0
    while True:
        left = None if ends is None else ends - time.monotonic()
        try:
            outcome = await request_summary(state, summary_provider=summary_provider, main_provider=main_provider,
                                            build_prompt=lambda i=index: build(i), now=now(), force=force,
                                            abort_on_failure=abort_on_failure, deadline_s=left, window=job.window)
        except NoRoom as no_room:
            return SummaryOutcome(None, reason=str(no_room))
        if outcome.body is None or index + 1 >= carried["parts"].count:
            return outcome
        carried["previous"] = shorten_summary(outcome.body, job.budget, job.counter, cut_off=outcome.cut_off)
        index += 1
