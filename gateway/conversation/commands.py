"""Chat commands (R-G5): parsing, permissions and the texts users see.

``/compress [focus]`` (admin), ``/new [--unpin]``, ``/status``, ``/stats`` (admin), ``/usage``,
``/approve CODE`` (admin), ``/model [NAME | reset]`` (setting it: admin), ``/forget me`` (someone else:
admin), ``/stop`` (the sender of the running
answer, or an admin; handled by the router, outside the queue, and carried to the worker running the turn by
`gateway.intake.stops`), ``/persona [TEXT | reset]`` (admin), ``/pin TEXT``, ``/pins``, ``/unpin N`` (pin and
unpin: admins in groups), ``/whoami``, ``/help``. Commands work the same on every platform;
adapters recognise them (``adapters.base.parse_command``, which drops ``/cmd@otherbot``). Texts here are short on purpose: chat is not a log, and a summary never appears in it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from adapters.base import Inbound
from agent.compression.engine import CompressionResult, ContextEngine
from agent.events import EventSink, NoticeSink
from agent.memory import MemoryFull
from gateway.config import PricingSettings
from gateway.conversation.compaction import compress_session, hygiene_check
from gateway.conversation.erasure import ErasureReport
from gateway.conversation.forget import forget_command
from gateway.conversation.model_command import model_command
from gateway.conversation.pins import add_pin, format_pins, remove_pin
from gateway.conversation.session import LiveSession, SessionManager
from gateway.intake.busy import RunningTurn, StopOutcome
from gateway.intake.keys import SessionKey
from gateway.intake.stops import StopRelay
from gateway.ops.metrics import Metrics
from gateway.policy.limits import RateLimiter, format_top_spenders, format_usage
from gateway.policy.pairing import Pairing
from gateway.policy.pricing import dollars, tokens_cost

__all__ = [
    "ADMIN_COMMANDS",
    "CHANGING_COMMANDS",
    "COMMANDS",
    "CONSOLE_COMMANDS",
    "INTERRUPTED_COMMAND",
    "Command",
    "CommandContext",
    "StatusFigures",
    "approve_command",
    "format_compress_result",
    "format_help",
    "format_stats",
    "format_status",
    "is_admin",
    "is_operator",
    "nothing_to_compress",
    "persona_command",
    "run_command",
    "stats_command",
    "status_figures",
    "stop_command",
    "usage_command",
    "whoami",
]

COMMANDS: dict[str, str] = {
    "compress": "/compress [focus] — compress this conversation now (optionally keeping a topic in detail)",
    "new": "/new — start a fresh session (the old one stays searchable; pins stay, /new --unpin drops them)",
    "status": "/status — context usage, thresholds and compression history",
    "stats": "/stats — gateway-wide counters since start: turns, latency, tokens, compressions",
    "stop": "/stop — stop the answer being written (yours; admins can stop any)",
    "usage": "/usage — your token use today and the limits that apply to you",
    "approve": "/approve CODE — let the sender of a DM pairing code use the bot",
    "persona": "/persona [TEXT | reset] — show or set who the bot is in this chat",
    "model": "/model [NAME | reset] — the configured models and this chat's; admins pick this chat's model",
    "pin": "/pin TEXT — keep a rule word for word in every request of this chat",
    "pins": "/pins — the pinned rules",
    "unpin": "/unpin N — remove pin N",
    "remember": "/remember <fact> — save a fact to the bot-wide memory, which every chat sees (operators only)",
    "whoami": "/whoami — your id, as gateway.admins and the access lists name you",
    "forget": "/forget me — erase everything you wrote in this chat (admins: /forget platform:user-id)",
    "help": "/help — this list",
}
# Only the console has these (it handles them itself): never registered on a platform.
CONSOLE_COMMANDS: dict[str, str] = {
    "quit": "/quit — leave the console (so do Ctrl-D, and Ctrl-C at an empty prompt)",
}
ADMIN_COMMANDS = frozenset({"compress", "stats", "approve", "persona", "remember"})
# /new resets a conversation everyone in a group shares, so there it is an admin command too.
GROUP_ADMIN_COMMANDS = frozenset({"compress", "new", "stats", "approve", "persona", "remember", "pin", "unpin"})
UNPIN_FLAG = "--unpin"
# Commands that change something stored (or a memory file): each runs at most once per message, so a retry
# after a crash in the middle of one says so instead of running it again.
CHANGING_COMMANDS = frozenset({"compress", "new", "pin", "unpin", "approve", "remember", "forget"})

INTERRUPTED_COMMAND = ("⚠️ /{name} was interrupted before it could answer (a restart or a storage outage) and "
                       "may or may not have taken effect; check before sending it again.")
NOTHING_TO_COMPRESS = "Nothing to compress: everything is already in the protected head and tail."
REFUSAL = "Sorry, /{name} is for admins only."
OPERATOR_REFUSAL = "Sorry, /stats is for the bot's operators (gateway.admins) only."
REMEMBER_REFUSAL = ("Sorry, /remember writes the bot-wide memory that every chat sees, so it is for the bot's "
                    "operators (gateway.admins) only.")
BUSY = "A compression of this conversation is already running; try again in a moment."
MANUAL_REASON = "manual /compress"


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: its lower-case name and the rest of the line."""

    name: str
    args: str = ""

    @property
    def known(self) -> bool:
        """Whether Concord implements this command."""
        return self.name in COMMANDS

    @property
    def changes_state(self) -> bool:
        """Whether running it changes something stored (``/persona`` with text sets or drops the persona)."""
        return self.name in CHANGING_COMMANDS or (self.name == "persona" and bool(self.args))

    def needs_admin(self, in_group: bool) -> bool:
        """Whether only admins may run it in this kind of chat."""
        return self.name in (GROUP_ADMIN_COMMANDS if in_group else ADMIN_COMMANDS)

    @classmethod
    def of(cls, inbound: Inbound) -> Command | None:
        """The command an adapter recognised in ``inbound`` (adapters strip ``@botname`` suffixes)."""
        if not inbound.is_command or not inbound.command:
            return None
        return cls(inbound.command.lower(), inbound.command_args.strip())


def is_admin(platform: str, user_id: str, admins: list[str], hint: bool = False) -> bool:
    """Whether ``platform:user_id`` is configured as an admin, or the adapter vouches for them.

    The hint is the adapter's own finding (a Discord admin role, a Telegram chat administrator where the
    operator enabled those checks); the configured list is always honoured on its own.
    """
    return hint or f"{platform}:{user_id}" in admins


def is_operator(inbound: Inbound, admins: list[str]) -> bool:
    """Whether the sender runs this bot: configured in ``gateway.admins``, or at the local console.

    Stricter than `is_admin`: a Discord admin role or Telegram chat administrator runs one community, and
    gateway-wide figures describe every community the bot serves.
    """
    return inbound.platform == "console" or is_admin(inbound.platform, inbound.user_id, admins)


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


def format_compress_result(result: CompressionResult) -> str:
    """The one-line answer to /compress; never includes summary text."""
    if result.aborted:
        # The reason already went out as the aborted notice; the reply only says where things stand.
        return "⚠️ Compression aborted: the conversation is unchanged. Run /compress to retry or /new."
    if not result.compressed:
        return f"Nothing was compressed ({result.reason})." if result.reason else NOTHING_TO_COMPRESS
    return (
        f"Compressed: {result.messages_before:,} → {result.messages_after:,} messages, "
        f"{result.tokens_before:,} → {result.tokens_after:,} tokens ({result.savings_pct:.0%} saved)."
    )


def format_help(admin: bool, *, console: bool = False) -> str:
    """The /help reply; admin-only commands are marked for non-admins; the console adds its own."""
    lines = ["Commands:"]
    for name, text in COMMANDS.items():
        suffix = " (admins only)" if name in ADMIN_COMMANDS and not admin else ""
        lines.append(f"  {text}{suffix}")
    if console:
        lines += [f"  {text}" for text in CONSOLE_COMMANDS.values()]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What a command runs against: the session (already locked), who asked, and where notices go."""

    sessions: SessionManager
    live: LiveSession
    inbound: Inbound
    admin: bool
    notices: NoticeSink | None = None
    events: EventSink | None = None
    limiter: RateLimiter | None = None
    pairing: Pairing | None = None
    # Told what an erasure (/forget) removed, so text the router holds in memory goes too.
    erased: Callable[[ErasureReport], None] | None = None


async def run_command(command: Command, ctx: CommandContext) -> tuple[str, LiveSession]:
    """Run ``command``; return the reply and the session the chat is now on (``/new`` changes it)."""
    if command.needs_admin(ctx.live.key.is_group) and not ctx.admin:
        return REFUSAL.format(name=command.name), ctx.live
    if command.name == "compress":
        return await _compress(ctx, command.args or None), ctx.live
    if command.name == "new":
        return await _new(ctx, command.args)
    if command.name in ("pin", "pins", "unpin"):
        return await _pins(ctx, command), ctx.live
    if command.name == "status":
        return format_status(status_figures(ctx.sessions, ctx.live)), ctx.live
    if command.name == "stats":
        if not is_operator(ctx.inbound, ctx.sessions.rt.settings.gateway.admins):
            return OPERATOR_REFUSAL, ctx.live
        return await stats_command(ctx), ctx.live
    if command.name == "usage":
        return await usage_command(ctx), ctx.live
    if command.name == "approve":
        return await approve_command(ctx, command.args), ctx.live
    if command.name == "persona":
        return await persona_command(ctx, command.args), ctx.live
    if command.name == "model":
        return await model_command(ctx.sessions, ctx.live, command.args, admin=ctx.admin), ctx.live
    if command.name == "remember":
        return await _remember(ctx, command.args), ctx.live
    if command.name == "whoami":
        return whoami(ctx.inbound), ctx.live
    if command.name == "forget":
        return await forget_command(ctx.sessions, ctx.live, ctx.inbound, command.args, admin=ctx.admin,
                                    erased=ctx.erased), ctx.live
    if command.name == "help":
        return format_help(ctx.admin, console=ctx.inbound.platform == "console"), ctx.live
    return f"Unknown command /{command.name}. Try /help.", ctx.live


def whoami(inbound: Inbound) -> str:
    """/whoami: the sender's ``platform:id``, ready to paste into ``gateway.admins`` or an access list."""
    me = f"{inbound.platform}:{inbound.user_id}"
    return (f"You are {me}. That is how gateway.admins and the access lists (gateway.allow_users, deny_users) "
            f"name you, e.g. CONCORD_GATEWAY__ADMINS={me}")


NOTHING_TO_STOP = "Nothing is running here to stop."
NOT_YOURS = "Only {name}, who asked, or an admin can stop this answer."
STOP_UNREACHABLE = "⚠️ I could not reach the answer being written to stop it; try /stop again in a moment."


async def stop_command(running: RunningTurn | None, relay: StopRelay, key: SessionKey, inbound: Inbound,
                       admin: bool) -> str | None:
    """/stop: cancel the session's running turn (its sender's or an admin's) — here, or through ``relay`` on the
    worker running it; None when it was stopped (the turn itself then says so, under what it had written)."""
    if running is not None:
        outcome, name = running.request_stop(inbound.user_id, admin), running.user_name
    else:
        outcome, name = await relay.forward(str(key), inbound.user_id, admin)
    return {StopOutcome.STOPPED: None, StopOutcome.NOT_YOURS: NOT_YOURS.format(name=name),
            StopOutcome.NOTHING: NOTHING_TO_STOP, StopOutcome.UNREACHABLE: STOP_UNREACHABLE}[outcome]


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


APPROVE_USAGE = "Usage: /approve CODE (the code the bot gave the person in a direct message)."
APPROVE_UNKNOWN = "No pending pairing code {code}: it is wrong, expired or already used."


async def approve_command(ctx: CommandContext, code: str) -> str:
    """/approve CODE (admins): let the sender the pairing code was issued to use the bot from now on."""
    if ctx.pairing is None:
        return "Pairing is off (gateway.dm_policy is not 'pairing')."
    if not code.strip():
        return APPROVE_USAGE
    user = await ctx.pairing.approve(code)
    if user is None:
        return APPROVE_UNKNOWN.format(code=code.strip())
    return f"Approved {user}: they can use the bot now."


PERSONA_MAX_CHARS = 4000


async def persona_command(ctx: CommandContext, args: str) -> str:
    """/persona (admins): show this chat's persona, set it (``/persona TEXT``) or drop it (``/persona reset``)."""
    text = args.strip()
    if not text:
        own = ctx.live.persona
        return f"This chat's persona: {own}" if own else "This chat uses the configured persona. " \
            "Set one with /persona TEXT."
    if text.lower() == "reset":
        await ctx.sessions.set_persona(ctx.live, None)
        return "Persona reset: this chat uses the configured one again."
    if len(text) > PERSONA_MAX_CHARS:
        return f"That persona is {len(text):,} characters; keep it under {PERSONA_MAX_CHARS:,}."
    await ctx.sessions.set_persona(ctx.live, text)
    return "Persona set for this chat; it applies from the next answer."


async def _new(ctx: CommandContext, args: str) -> tuple[str, LiveSession]:
    old = ctx.live.id
    unpinned = 0
    if args.strip() == UNPIN_FLAG:
        unpinned = await ctx.sessions.rt.store.pins.clear(ctx.live.key.platform, ctx.live.key.chat_key)
    fresh = await ctx.sessions.start_new(ctx.live, ctx.inbound.user_id)
    note = f" {unpinned} pin(s) removed." if unpinned else ""
    return f"Started a new session. The previous one ({old}) is kept and searchable.{note}", fresh


async def _pins(ctx: CommandContext, command: Command) -> str:
    """/pin, /pins, /unpin: change or list the chat's pins; the system prompt follows at once."""
    rt, key = ctx.sessions.rt, ctx.live.key
    if command.name == "pins":
        return format_pins(ctx.live.pins, rt)
    if command.name == "pin":
        reply = await add_pin(rt, key, command.args, by=f"{ctx.inbound.platform}:{ctx.inbound.user_id}")
    else:
        reply = await remove_pin(rt, key, command.args)
    await ctx.sessions.refresh_pins(ctx.live)
    return reply


async def _compress(ctx: CommandContext, focus: str | None) -> str:
    live = ctx.live
    framed = [{"role": "system", "content": live.system_prompt}, *live.messages]
    counts = live.held_counts or [ctx.sessions.rt.counter.count_message(m) for m in live.messages]
    if not live.engine.has_content_to_compress(framed):
        return nothing_to_compress(live.engine, counts)
    async with ctx.sessions.rt.locks.try_compression_lock(live.id) as acquired:
        if not acquired:
            return BUSY
        before = len(live.messages), sum(counts)
        result = await compress_session(ctx.sessions, live, reason=MANUAL_REASON, focus=focus, force=True,
                                        notices=ctx.notices, events=ctx.events)
    if result.compressed:
        # Told as the store records it (`concord sessions show`, /status's message count): the conversation's
        # messages and their tokens, without the system prompt the engine was also given.
        result = replace(result, messages_before=before[0], tokens_before=before[1],
                         messages_after=len(live.messages), tokens_after=sum(live.token_counts))
    return format_compress_result(result)


def nothing_to_compress(engine: ContextEngine, counts: Sequence[int]) -> str:
    """Why /compress has nothing to do, in figures one can act on: the verbatim tail is sized in tokens, and
    ``counts`` are the conversation's messages' token counts."""
    if not counts:
        return "Nothing to compress: this conversation has no messages yet."
    budget = getattr(engine, "tail_token_budget", None)
    if not isinstance(budget, int):  # another context engine: no figures to give
        return NOTHING_TO_COMPRESS
    sizing = (f"the newest messages up to {budget:,} tokens (compression.target_ratio × the "
              f"{engine.threshold_tokens:,}-token compression threshold: the tail is sized in tokens, not messages)")
    total = sum(counts)
    if total <= budget:
        return (f"Nothing to compress yet: all {len(counts):,} messages ({total:,} tokens) fit in the verbatim "
                f"tail, which keeps {sizing}. /compress has work once the conversation outgrows that.")
    return (f"Nothing to compress: the verbatim tail keeps {sizing}, the head the first messages, and what lies "
            f"between cannot be summarized on its own (a tool call stays with its results, the last question "
            f"and answer stay whole). {len(counts):,} messages, {total:,} tokens.")


async def _remember(ctx: CommandContext, fact: str) -> str:
    # The bot-wide memory is in every chat's prompt on every platform: a community's admin is not enough.
    if not is_operator(ctx.inbound, ctx.sessions.rt.settings.gateway.admins):
        return REMEMBER_REFUSAL
    if not fact:
        return "Usage: /remember <fact> (saved to the bot-wide memory, which every chat sees)."
    try:
        await ctx.live.memory.append("bot", fact)
    except LookupError:
        return "Memory is turned off (memory.enabled: false), so nothing was saved."
    except MemoryFull as exc:
        return f"Not saved: {exc}."
    return "Saved to the bot-wide memory (MEMORY.md). Every chat sees it from its next session on."


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
