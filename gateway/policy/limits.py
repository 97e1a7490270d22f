"""Rate limits and daily token budgets per user and per chat (``limits.*``), and the texts users see.

A message the agent would answer is admitted first: the daily budgets are checked (spent so far against
``limits.user_tokens_per_day`` / ``limits.chat_tokens_per_day``), then one message is taken from the sender's
and the chat's per-minute buckets. A refusal is one notice saying which limit and when it resets; no LLM call
is made. After the turn, the prompt + completion tokens the provider reported are counted against both. A
budget is checked before a turn and the turn's cost is known only after it, so the last turn of a day may
overshoot the budget by its own size. Admins are exempt (the router does not ask).

Summary calls are charged too, as each returns: a compaction's summary call is made deep in the context
engine, which knows no users, so the gateway names who pays around the work that may compact
(`summaries_charged_to`) — the sender of the message being handled, for hygiene before the turn, the agent's
own preflight and recovery compactions and ``/compress``; the chat alone for a scheduled sweep — and the
engine's metered provider calls `charge_summary` with each call's usage.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from adapters.base import Inbound
from agent.llm.base import Usage as CallUsage
from gateway.config import LimitsSettings, PricingSettings
from gateway.intake.keys import SessionKey
from gateway.policy.access import user_ref
from gateway.policy.limit_backends import Bucket, LimitBackend
from gateway.policy.pricing import dollars, tokens_cost

__all__ = ["RateLimiter", "Usage", "charge_summary", "format_duration", "format_top_spenders", "format_usage",
           "summaries_charged_to"]

USER_RATE = "⏳ You can send {limit} a minute; try again in {wait}."
CHAT_RATE = "⏳ This chat can send the bot {limit} a minute; try again in {wait}."
USER_BUDGET = "⏳ You have used today's token budget ({limit:,} tokens). It resets at 00:00 UTC, in {reset}."
CHAT_BUDGET = "⏳ This chat has used today's token budget ({limit:,} tokens). It resets at 00:00 UTC, in {reset}."


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``5 h 12 min``: a wait as a person says it (rounded up, never ``0 s``)."""
    whole = max(1, int(-(-seconds // 1)))
    if whole < 60:
        return f"{whole} s"
    minutes = -(-whole // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@dataclass(frozen=True, slots=True)
class Usage:
    """What ``/usage`` shows: today's tokens of the sender and the chat, and the limits that apply."""

    user_tokens: int
    chat_tokens: int
    limits: LimitsSettings
    resets_in_s: float
    exempt: bool
    # Of those, the tokens of summary calls (compactions), and of those their answers'.
    user_summary_tokens: int = 0
    chat_summary_tokens: int = 0
    user_summary_output: int = 0
    chat_summary_output: int = 0


def format_usage(u: Usage, prices: PricingSettings | None = None) -> str:
    """The /usage reply; with ``prices`` configured, what the summaries cost."""
    lim = u.limits

    def of(spent: int, summaries: int, output: int, budget: int | None) -> str:
        share = ""
        if summaries:
            cost = tokens_cost(prices, prompt=summaries - output, completion=output) if prices else None
            share = (f", {summaries:,} of them summaries ({summaries - output:,} in, {output:,} out"
                     + (f", {dollars(cost)}" if cost is not None else "") + ")")
        return f"{spent:,} tokens" + (f" of {budget:,}" if budget else " (no daily limit)") + share

    def rate(limit: int | None) -> str:
        return f"{limit} a minute" if limit else "no limit"

    you = of(u.user_tokens, u.user_summary_tokens, u.user_summary_output, lim.user_tokens_per_day)
    chat = of(u.chat_tokens, u.chat_summary_tokens, u.chat_summary_output, lim.chat_tokens_per_day)
    lines = [f"Today (UTC): you {you}; this chat {chat}.",
             f"Messages: you {rate(lim.user_messages_per_minute)}, this chat {rate(lim.chat_messages_per_minute)}.",
             f"Budgets reset at 00:00 UTC, in {format_duration(u.resets_in_s)}."]
    if u.exempt:
        lines.append("You are an admin: limits do not apply to you.")
    return "\n".join(lines)


def format_top_spenders(top: list[tuple[str, int]]) -> str:
    """The /stats lines naming today's biggest spenders (``user:discord:42`` → ``discord:42``)."""
    if not top:
        return "Top spenders today: none yet"
    return "Top spenders today: " + ", ".join(f"{subject.removeprefix('user:')} {tokens:,}" for subject, tokens in top)


class RateLimiter:
    """Admits messages and counts tokens against ``settings`` over ``backend``."""

    def __init__(self, settings: LimitsSettings, backend: LimitBackend, clock: Callable[[], datetime]) -> None:
        self.settings = settings
        self.backend = backend
        self._clock = clock

    @staticmethod
    def subjects(inbound: Inbound) -> tuple[str, str]:
        """(the sender's subject, the chat's subject); a thread counts under its channel."""
        return f"user:{user_ref(inbound)}", f"chat:{inbound.platform}:{inbound.chat_id}"

    @staticmethod
    def chat_subject(key: SessionKey) -> str:
        """The subject of the chat a session is in (as `subjects` names it for that chat's messages)."""
        return f"chat:{key.platform}:{key.chat_id}"

    def _day(self) -> tuple[str, float]:
        now = self._clock()
        midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return now.date().isoformat(), (midnight - now).total_seconds()

    async def admit(self, inbound: Inbound) -> str | None:
        """None when ``inbound`` may go to the agent (one message is taken from its buckets), else the notice
        that says which limit it hit and when that resets."""
        lim = self.settings
        user, chat = self.subjects(inbound)
        budgets = [(user, lim.user_tokens_per_day, USER_BUDGET), (chat, lim.chat_tokens_per_day, CHAT_BUDGET)]
        budgets = [b for b in budgets if b[1]]
        if budgets:
            day, reset_s = self._day()
            spent = await self.backend.spent([subject for subject, _, _ in budgets], day)
            for (_, budget, text), used in zip(budgets, spent, strict=True):
                if used >= budget:
                    return text.format(limit=budget, reset=format_duration(reset_s))
        rates = [(Bucket(user, n), USER_RATE) for n in (lim.user_messages_per_minute,) if n]
        rates += [(Bucket(chat, n), CHAT_RATE) for n in (lim.chat_messages_per_minute,) if n]
        if not rates:
            return None
        refused = await self.backend.take([bucket for bucket, _ in rates])
        if refused is None:
            return None
        index, wait_s = refused
        bucket, text = rates[index]
        count = f"{bucket.per_minute} message" + ("s" if bucket.per_minute != 1 else "")
        return text.format(limit=count, wait=format_duration(wait_s))

    async def record(self, inbound: Inbound, tokens: int) -> None:
        """Count a turn's ``tokens`` against the sender and the chat (kept for /usage and /stats even when no
        budget is set)."""
        await self.charge(self.subjects(inbound), tokens)

    async def charge(self, subjects: Sequence[str], tokens: int, *, summary: bool = False, output: int = 0) -> None:
        """Count ``tokens`` against ``subjects`` today; ``summary``: a summary call's, ``output`` of them its
        answer's (shown apart in /usage)."""
        if tokens > 0:
            day, _ = self._day()
            await self.backend.add(subjects, day, tokens, summary=summary, output=output)

    async def usage(self, inbound: Inbound, *, exempt: bool) -> Usage:
        """Today's figures for the sender of ``inbound`` and their chat."""
        day, reset_s = self._day()
        subjects = self.subjects(inbound)
        user_tokens, chat_tokens = await self.backend.spent(subjects, day)
        (user_summaries, user_output), (chat_summaries, chat_output) = await self.backend.summary_spent(subjects, day)
        return Usage(user_tokens, chat_tokens, self.settings, reset_s, exempt, user_summaries, chat_summaries,
                     user_output, chat_output)

    async def top_spenders(self, count: int = 5) -> list[tuple[str, int]]:
        """Today's biggest spenders (users)."""
        day, _ = self._day()
        return await self.backend.top(day, count)


# Who pays for the summary calls made in this context: the limiter and the subjects to charge.
_payer: contextvars.ContextVar[tuple[RateLimiter, tuple[str, ...]] | None] = contextvars.ContextVar(
    "concord_summary_payer", default=None)


@contextlib.contextmanager
def summaries_charged_to(limiter: RateLimiter, subjects: Sequence[str]) -> Iterator[None]:
    """Charge the summary calls made inside this block (and in tasks it starts, such as the agent loop's) to
    ``subjects``."""
    token = _payer.set((limiter, tuple(subjects)))
    try:
        yield
    finally:
        _payer.reset(token)


async def charge_summary(usage: CallUsage) -> None:
    """Count one summary call's prompt + completion tokens against whoever `summaries_charged_to` names here
    (nobody outside such a block: ``concord compress``, tests)."""
    payer = _payer.get()
    if payer is not None:
        limiter, subjects = payer
        await limiter.charge(subjects, usage.prompt_tokens + usage.completion_tokens, summary=True,
                             output=usage.completion_tokens)
