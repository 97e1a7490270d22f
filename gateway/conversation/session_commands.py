"""The commands that act on a chat's session and settings: ``/compress``, ``/new``, ``/pin``, ``/pins``,
``/unpin``, ``/persona``, ``/approve`` and ``/remember``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agent.compression.engine import CompressionResult, ContextEngine
from agent.memory import MemoryFull
from gateway.conversation.ahead import compaction_ended, compaction_wait_s
from gateway.conversation.command_rules import Command, CommandContext, is_operator
from gateway.conversation.compaction import compress_session, engine_inputs, framed
from gateway.conversation.pins import add_pin, format_pins, remove_pin
from gateway.conversation.session import LiveSession

__all__ = [
    "NOTHING_TO_COMPRESS",
    "approve_command",
    "compress_command",
    "format_compress_result",
    "new_command",
    "nothing_to_compress",
    "persona_command",
    "pins_command",
    "remember_command",
]

UNPIN_FLAG = "--unpin"
NOTHING_TO_COMPRESS = "Nothing to compress: everything is already in the protected head and tail."
REMEMBER_REFUSAL = ("Sorry, /remember writes the bot-wide memory that every chat sees, so it is for the bot's "
                    "operators (gateway.admins) only.")
BUSY = "A compression of this conversation is already running; try again in a moment."
AFTER_RUNNING = "A compaction of this conversation was running and has finished. "
MANUAL_REASON = "manual /compress"


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


async def new_command(ctx: CommandContext, args: str) -> tuple[str, LiveSession]:
    old = ctx.live.id
    unpinned = 0
    if args.strip() == UNPIN_FLAG:
        unpinned = await ctx.sessions.rt.store.pins.clear(ctx.live.key.platform, ctx.live.key.chat_key)
    fresh = await ctx.sessions.start_new(ctx.live, ctx.inbound.user_id)
    note = f" {unpinned} pin(s) removed." if unpinned else ""
    return f"Started a new session. The previous one ({old}) is kept and searchable.{note}", fresh


async def pins_command(ctx: CommandContext, command: Command) -> str:
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


async def compress_command(ctx: CommandContext, focus: str | None) -> str:
    """/compress [focus]: compress the conversation now. A compaction of it already running (ahead of need, in
    any worker) is waited for, at most as long as a message would wait, and /compress acts on what it left."""
    live, rt = ctx.live, ctx.sessions.rt
    after_running = await rt.locks.compression_running(live.id)
    if after_running:
        if not await compaction_ended(rt.locks, live.id, compaction_wait_s(rt.settings)):
            return BUSY
        live = await ctx.sessions.open(live.key, ctx.inbound.user_id)
    reply = await _compress_now(ctx, live, focus)
    return AFTER_RUNNING + reply if after_running else reply


async def _compress_now(ctx: CommandContext, live: LiveSession, focus: str | None) -> str:
    counts = live.held_counts or [ctx.sessions.rt.counter.count_message(m) for m in live.messages]
    # The check plans the compaction, which prunes: after a restart the stored counts and records spare it
    # tokenizing the session and pruning it anew, and the compaction takes them from here.
    inputs = await engine_inputs(ctx.sessions.rt, live)
    if not live.engine.has_content_to_compress(framed(live), **inputs):
        return nothing_to_compress(live.engine, counts)
    async with ctx.sessions.rt.locks.try_compression_lock(live.id) as acquired:
        if not acquired:
            return BUSY
        before = len(live.messages), sum(counts)
        result = await compress_session(ctx.sessions, live, reason=MANUAL_REASON, focus=focus, force=True,
                                        notices=ctx.notices, events=ctx.events, inputs=inputs)
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


async def remember_command(ctx: CommandContext, fact: str) -> str:
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
