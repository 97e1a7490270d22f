"""The system prompt of a session: who the bot is, where it talks, the frozen memory snapshot.

Rebuilt at session start and after every compaction (R-S4); stable in between so prompt caching holds.
A session that was compacted before carries the compressor's one-time compaction note and a pointer to
the search_history / read_history tools that look up what the compaction took out of view. The chat's
pinned rules (gateway/pins.py) close the prompt.
"""

from __future__ import annotations

from agent.compression.assemble import add_compaction_note
from agent.memory import MemoryProvider
from gateway.history import READ_TOOL
from gateway.keys import SessionKey
from gateway.recall import RECALL_TOOL

__all__ = ["RECALL_HINT", "build_system_prompt", "persona_text", "speaker_tag"]

RECALL_HINT = (f"Earlier turns compacted away are kept word for word: look up exact values from them "
               f"(ids, numbers, error texts, constraints) with the {RECALL_TOOL} tool, and open a message "
               f"whole by its number (#N) with {READ_TOOL}, instead of guessing.")
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


def build_system_prompt(bot_name: str, key: SessionKey, memory: MemoryProvider, *, compacted: bool,
                        persona: str | None = None, pins: str = "", tools_note: str = "") -> str:
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
    if compacted:
        noted = add_compaction_note({"role": "system", "content": prompt})
        # Part of the note, so the prompt changes only once, at the first compaction (R-K2).
        prompt = f"{noted['content']}\n\n{RECALL_HINT}"
    return f"{prompt}\n\n{pins}" if pins else prompt


def speaker_tag(name: str, text: str) -> str:
    """A group message as the model sees it: ``[Name] text``."""
    clean = " ".join(name.split()) or "someone"
    return f"[{clean}] {text}"
