"""The commands that show figures: ``/status`` (one session's context and compaction history), ``/stats``
(gateway-wide counters since start, operators only) and ``/usage`` (the sender's tokens today and the limits)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.config import PricingSettings
from gateway.conversation.command_rules import CommandContext
from gateway.conversation.compaction import hygiene_check
from gateway.conversation.session import LiveSession, SessionManager
from gateway.ops.metrics import Metrics
from gateway.policy.limits import format_top_spenders, format_usage
from gateway.policy.pricing import dollars, tokens_cost

__all__ = ["StatusFigures", "format_stats", "format_status", "stats_command", "status_figures", "usage_command"]


@dataclass(frozen=True, slots=True)
class StatusFigures:
    """Everything /status shows for one session."""

    session_id: str
    tokens: int
    token_source: str
    context_length: int
    threshold_tokens: int
    hygiene_tokens: int
    hygiene_message_limit: int
    messages: int
    compression_count: int
    engine: str
    model: str
    last_compaction_at: datetime | None = None
    last_compaction_reason: str = ""
    last_compaction_savings: float | None = None
    pins: int = 0
    pin_tokens: int = 0
    # What the next request will hold before the new message: active messages, system prompt, tool schemas.
    next_request_tokens: int | None = None
    tool_count: int = 0
    # How the window is known: "reported by the server (llama.cpp /props)", "configured (…)", …
    window_source: str = ""


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "n/a"


def format_status(s: StatusFigures) -> str:
    """The /status reply: one figure per line."""
    source = ("last real prompt: the size the model reported for its last request" if s.token_source == "usage"
              else "counted: no request has reported its size yet")
    lines = [
        f"Session {s.session_id}",
        f"Context: {s.tokens:,} / {s.context_length:,} tokens ({_pct(s.tokens, s.context_length)}, {source})",
        *([f"Next request: {s.next_request_tokens:,} / {s.context_length:,} tokens "
            f"({_pct(s.next_request_tokens, s.context_length)}: {s.messages:,} messages, system prompt, "
            f"{s.tool_count} tool schemas, as counted here before your next message)"]
          if s.next_request_tokens is not None else []),
        *([f"Window: {s.context_length:,} tokens, {s.window_source}"] if s.window_source else []),
        f"Messages: {s.messages:,}",
        f"Compression threshold: {s.threshold_tokens:,} tokens ({_pct(s.threshold_tokens, s.context_length)})",
        f"Hygiene threshold: {s.hygiene_tokens:,} tokens ({_pct(s.hygiene_tokens, s.context_length)}) "
        f"or > {s.hygiene_message_limit:,} messages",
        f"Compressions: {s.compression_count}",
    ]
    if s.last_compaction_at is not None:
        when = s.last_compaction_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        savings = f", saved {s.last_compaction_savings:.0%}" if s.last_compaction_savings is not None else ""
        lines.append(f"Last compaction: {when} ({s.last_compaction_reason or 'unknown'}{savings})")
    else:
        lines.append("Last compaction: never")
    lines.append(f"Pins: {s.pins} ({s.pin_tokens:,} tokens, in every request)")
    lines.append(f"Engine: {s.engine} · Model: {s.model or 'unset'}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _uptime(seconds: float) -> str:
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h {minutes}m" if days else f"{hours}h {minutes}m"


def format_stats(m: Metrics, live_sessions: int, prices: PricingSettings | None = None) -> str:
    """The /stats reply: process-wide figures since start, one topic per line; no content, no secrets. With
    ``prices`` configured, what the tokens cost."""
    p50, p95 = m.turn_latency()
    tallies = sorted(m.compressions.items())
    done = sum(t.count for _, t in tallies)
    lines = [
        f"Uptime: {_uptime(m.uptime_s)} · live sessions in memory: {live_sessions:,}",
        f"Messages: {m.messages:,} · turns: {m.turns:,} ({m.turn_failures:,} failed)",
        f"Turn latency: p50 {_seconds(p50)}, p95 {_seconds(p95)} (last {len(m.turn_seconds):,} turns)",
        f"LLM calls: {m.llm_calls:,} ({m.agent_llm_calls:,} agent, {m.summary_calls:,} summary, "
        f"{m.summary_failures:,} summary failed)",
        f"Tokens: {m.prompt_tokens:,} prompt, {m.completion_tokens:,} completion, "
        f"{m.cache_read_tokens:,} cache read (summaries: {m.summary_prompt_tokens:,} prompt, "
        f"{m.summary_completion_tokens:,} completion)",
        f"Tool calls: {m.tool_calls:,} ({m.tool_failures:,} failed)",
        f"Compressions: {done:,} · saved {sum(t.tokens_saved for _, t in tallies):,} tokens · "
        f"aborted {sum(t.aborted for _, t in tallies):,} · static fallback {sum(t.static for _, t in tallies):,}",
    ]
    lines += [f"  {kind} — {t.count:,} (avg {t.average_savings:.0%} saved)"
              + (f", {t.aborted:,} aborted" if t.aborted else "") for kind, t in tallies]
    if prices is not None:
        total = tokens_cost(prices, prompt=m.prompt_tokens, completion=m.completion_tokens,
                            cache_read=m.cache_read_tokens, cache_write=m.cache_write_tokens)
        summaries = tokens_cost(prices, prompt=m.summary_prompt_tokens, completion=m.summary_completion_tokens,
                                cache_read=m.summary_cache_read_tokens, cache_write=m.summary_cache_write_tokens)
        if total is not None and summaries is not None:
            lines.append(f"Cost (pricing.*): {dollars(total)}, of it summaries {dollars(summaries)}")
    return "\n".join(lines)


async def stats_command(ctx: CommandContext) -> str:
    """/stats: the gateway-wide figures, then today's top spenders when limits are tracked."""
    rt = ctx.sessions.rt
    text = format_stats(rt.metrics, len(ctx.sessions), rt.settings.pricing)
    if ctx.limiter is not None:
        text = f"{text}\n{format_top_spenders(await ctx.limiter.top_spenders())}"
    return text


async def usage_command(ctx: CommandContext) -> str:
    """/usage: the sender's and the chat's tokens today, and the limits that apply."""
    if ctx.limiter is None:
        return "Usage is not tracked here."
    return format_usage(await ctx.limiter.usage(ctx.inbound, exempt=ctx.admin), ctx.sessions.rt.settings.pricing)


def status_figures(sessions: SessionManager, live: LiveSession) -> StatusFigures:
    """Collect the /status figures of ``live``."""
    check = hygiene_check(sessions, live)
    engine, last = live.engine, live.last_compaction
    schemas = live.loop.schemas()
    return StatusFigures(
        session_id=live.id, tokens=check.tokens, token_source=check.token_source,
        context_length=engine.context_length, threshold_tokens=engine.threshold_tokens,
        hygiene_tokens=check.token_limit, hygiene_message_limit=check.message_limit, messages=len(live.messages),
        compression_count=engine.compression_count, engine=sessions.rt.engine_name,
        model=live.models.preferred.name if live.models is not None else sessions.rt.model,
        last_compaction_at=last.at if last else None, last_compaction_reason=last.reason if last else "",
        last_compaction_savings=last.savings_pct if last else None,
        pins=len(live.pins), pin_tokens=sum(p.tokens for p in live.pins),
        next_request_tokens=sessions.rt.counter.count_request(live.messages, system=live.system_prompt, tools=schemas),
        tool_count=len(schemas), window_source=_window_source(sessions, engine.context_length),
    )


def _window_source(sessions: SessionManager, context_length: int) -> str:
    """How this session's window is known: the model's, or lowered for this session by an overflow error."""
    window = sessions.rt.window
    if window is None:
        return ""
    if context_length == window.tokens:
        return window.source
    return f"lowered for this session after an overflow error (the model's: {window.describe()})"
