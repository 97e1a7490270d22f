"""The system prompt of a session: who the bot is, where it talks, the frozen memory snapshot.

Built at session start and byte-identical for the session's life — compactions included — so a provider's
prompt cache keeps it (with the tool schemas) as the stable prefix of every request: what the model must
know about a compaction (that a handoff summary stands for earlier turns, and how search_history /
read_history look them up) travels in the summary message instead. It changes only when what it says
changes: a pin, the chat's persona, the outside tools offered. The chat's pinned rules (gateway/conversation/pins.py)
close the prompt.
"""

from __future__ import annotations

from agent.memory import MemoryProvider
from gateway.intake.keys import SessionKey

__all__ = ["build_system_prompt", "persona_text", "speaker_tag"]

_PLATFORM_NAMES = {"discord": "Discord", "telegram": "Telegram", "console": "a terminal"}
# What each platform does with the model's Markdown (Telegram's comes from our own conversion to its HTML).
_FORMATTING = {
    "discord": "Markdown is rendered.",
    "telegram": "Basic Markdown (bold, italics, code, code blocks, links, quotes) is rendered; tables are not.",
    "console": "Markdown is shown as typed, so keep formatting light.",
}


def persona_text(template: str | None, bot_name: str, platform: str) -> str:
    """Who the bot is: the operator's or a chat's persona (``gateway.system_prompt``, ``/persona``) with its
    ``{bot_name}`` / ``{platform}`` filled in, or the built-in one."""
    where = _PLATFORM_NAMES.get(platform, platform)
    if template is None:
        return f"You are {bot_name}, a helpful assistant chatting on {where}. Answer concisely."
    try:
        return template.format(bot_name=bot_name, platform=where).strip()
    except (KeyError, IndexError, ValueError):
        # A chat's /persona text is taken as typed: braces in it are the admin's words, not placeholders.
        return template.strip()


def build_system_prompt(bot_name: str, key: SessionKey, memory: MemoryProvider, *, persona: str | None = None,
                        pins: str = "", tools_note: str = "") -> str:
    """The system prompt for ``key``'s session; ``persona`` replaces the built-in "who you are" template;
    ``tools_note`` says how to read outside tools' results (MCP); ``pins`` (the chat's pinned-rules block)
    comes last, so it stays one stable block that changes only when a pin does."""
    formatting = _FORMATTING.get(key.platform, "Use Markdown sparingly.")
    parts = [f"{persona_text(persona, bot_name, key.platform)} {formatting}"]
    if key.is_group:
        parts.append("This is a group conversation. Each user message starts with the speaker's name in square "
                     "brackets; earlier channel messages you were not asked about may be quoted as context.")
    if tools_note:
        parts.append(tools_note)
    memory_block = memory.system_prompt_block()
    if memory_block:
        parts.append(memory_block)
    prompt = "\n\n".join(parts)
    return f"{prompt}\n\n{pins}" if pins else prompt


def speaker_tag(name: str, text: str) -> str:
    """A group message as the model sees it: ``[Name] text``."""
    clean = " ".join(name.split()) or "someone"
    return f"[{clean}] {text}"
