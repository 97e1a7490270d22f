"""Pinned rules: what a chat's users want kept word for word in every request, whatever gets compacted.

Pins belong to the chat (platform + chat key), not to one session, so they survive compaction, rotation,
restarts and — by design — ``/new`` (a chat's standing rules, such as "always answer in French", outlive a
fresh start; ``/new --unpin`` drops them too). They are one block at the end of the system prompt, which
compression never summarizes or prunes and which is counted with the prompt in every budget; the block
changes only when a pin does, so prompt caching keeps working. Limits (``gateway.pins_max_count``, and
``gateway.pins_max_tokens`` — but at most a tenth of the model's window, so a small model keeps room for the
conversation) are checked when pinning, with a refusal that says which was reached. Pins beyond that share
(the window learned smaller after they were pinned) are left out of the block, which says how many and where
to see them. Secrets are never pinned: a pin travels to the model with every message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent.compression.redact import redact_secrets
from agent.compression.threshold import pin_budget
from agent.tools.registry import Tool
from gateway.intake.keys import SessionKey
from gateway.runtime import Runtime
from gateway.store import PinRecord, PinsFull

__all__ = [
    "MAX_PIN_CHARS",
    "PINS_HEADER",
    "PIN_TOOL",
    "add_pin",
    "format_pins",
    "pin_token_limit",
    "pin_tool",
    "pins_block",
    "remove_pin",
]

PIN_TOOL = "pin"
MAX_PIN_CHARS = 2_000
PINS_HEADER = ("Pinned rules of this conversation, set by its users — follow them in every answer, "
               "word for word as written:")


def pin_token_limit(rt: Runtime) -> int:
    """Tokens a chat's pins may take: ``gateway.pins_max_tokens``, at most a tenth of the model's window."""
    limit = rt.settings.gateway.pins_max_tokens
    return limit if rt.window is None else min(limit, pin_budget(rt.window.tokens))


def pins_block(pins: Sequence[PinRecord], max_tokens: int | None = None) -> str:
    """The pins as the system prompt's last block ('' when there are none): in order, as many as fit
    ``max_tokens``, with a line saying how many more there are."""
    if not pins:
        return ""
    shown: list[PinRecord] = []
    used = 0
    for pin in pins:
        if max_tokens is not None and used + pin.tokens > max_tokens:
            break
        shown.append(pin)
        used += pin.tokens
    lines = [PINS_HEADER, *(f"{p.number}. {p.text}" for p in shown)]
    if len(shown) < len(pins):
        lines.append(f"({len(pins) - len(shown)} more pinned rules do not fit the model's window; /pins lists them.)")
    return "\n".join(lines)


def format_pins(pins: Sequence[PinRecord], rt: Runtime) -> str:
    """The /pins reply."""
    gw = rt.settings.gateway
    if not pins:
        return "No pinned rules. Pin one with /pin TEXT."
    used = sum(p.tokens for p in pins)
    lines = [f"Pinned rules ({len(pins)} of {gw.pins_max_count}, {used:,} of {pin_token_limit(rt):,} tokens):"]
    lines += [f"{p.number}. {p.text}" for p in pins]
    return "\n".join(lines)


async def add_pin(rt: Runtime, key: SessionKey, text: str, by: str | None) -> str:
    """Pin ``text`` in ``key``'s chat; the reply (a confirmation or why it was refused)."""
    rule = text.strip()
    if not rule:
        return "Usage: /pin TEXT — a rule to keep word for word in every request of this chat."
    if len(rule) > MAX_PIN_CHARS:
        return f"Not pinned: a pin is at most {MAX_PIN_CHARS:,} characters ({len(rule):,} given)."
    if redact_secrets(rule) != rule:
        return "Not pinned: it looks like it contains a secret, and pins are sent to the model with every message."
    gw = rt.settings.gateway
    try:
        pin = await rt.store.pins.add(key.platform, key.chat_key, rule, rt.counter.count_text(rule),
                                      max_count=gw.pins_max_count, max_tokens=pin_token_limit(rt), by=by)
    except PinsFull as full:
        why = "" if pin_token_limit(rt) == gw.pins_max_tokens or rt.window is None else \
            f" (a tenth of the model's {rt.window.tokens:,}-token window)"
        return f"Not pinned: {full}{why}. Remove one with /unpin N (see /pins) or shorten it."
    return f"Pinned #{pin.number} ({pin.tokens:,} tokens): {pin.text}"


async def remove_pin(rt: Runtime, key: SessionKey, argument: str) -> str:
    """Unpin the pin numbered ``argument``; the reply."""
    if not argument.strip().isdigit():
        return "Usage: /unpin N — N is the pin's number in /pins."
    removed = await rt.store.pins.remove(key.platform, key.chat_key, int(argument))
    if removed is None:
        return f"No pin #{int(argument)} here. /pins lists them."
    return f"Unpinned #{removed.number}: {removed.text}"


def pin_tool(rt: Runtime, key: SessionKey, on_change: Callable[[], Awaitable[None]]) -> Tool:
    """The ``pin`` tool: the model pins a lasting rule the user stated (offered in direct messages only,
    where the user is the whole conversation; in groups only admins pin, with /pin)."""

    async def handler(args: dict[str, Any]) -> str:
        reply = await add_pin(rt, key, str(args["text"]), by="model")
        if reply.startswith("Pinned"):
            await on_change()
        return reply

    return Tool(
        name=PIN_TOOL,
        description=("Pin a lasting rule or preference the user has just stated for this conversation "
                     "(e.g. 'always answer in French', 'never run migrations without asking'), so it is kept "
                     "word for word in every later request. Only for rules the user clearly wants kept; "
                     "quote them as the user said them."),
        parameters={"type": "object",
                    "properties": {"text": {"type": "string", "minLength": 1, "maxLength": MAX_PIN_CHARS,
                                            "description": "the rule, in the user's words"}},
                    "required": ["text"], "additionalProperties": False},
        handler=handler,
        timeout_s=10.0,
    )
