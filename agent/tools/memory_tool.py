"""The built-in ``memory`` tool: read or append to the long-term memory of this user, this chat or the bot.

The model uses it to keep what must outlive a compaction or a session: preferences, constraints, exact
values. Writes reach disk at once but the system prompt keeps the snapshot taken at session start. Which
scopes a conversation has, and whether this turn's sender may write one, is the memory's decision
(`MemoryStore.may_write`): the bot-wide memory reaches every chat, so only an operator's turn writes it. The
reply names the scope written, so the user knows who will see it.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from agent.tools.registry import Tool

__all__ = ["MAX_ENTRY_CHARS", "MemoryStore", "memory_tool"]

MAX_ENTRY_CHARS = 1_000
Scope = Literal["user", "chat", "bot"]
_DESCRIPTIONS = {
    "user": "user: this user's facts and preferences (seen only in their own conversations)",
    "chat": "chat: notes for this group chat (seen only here)",
    "bot": "bot: what you learned for everyone (seen in every chat; only the bot's operators may write it)",
}
_WHERE = {
    "user": "the user memory (USER.md, seen only in this user's own conversations)",
    "chat": "the chat memory (CHAT.md, seen only in this chat)",
    "bot": "the bot-wide memory (MEMORY.md, seen in every chat)",
}


class MemoryStore(Protocol):
    """What the tool needs from a memory provider."""

    @property
    def scopes(self) -> list[Scope]:
        """The scopes of this conversation, the default first."""
        ...

    def may_write(self, target: Scope) -> bool:
        """Whether this turn's sender may write ``target``."""
        ...

    async def read(self, target: Scope) -> str:
        """Current content of one memory file."""
        ...

    async def append(self, target: Scope, text: str) -> None:
        """Add one entry to a memory file."""
        ...


def memory_tool(store: MemoryStore) -> Tool:
    """A ``memory`` tool over ``store``, offering the scopes this conversation has."""
    targets = list(store.scopes)
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["read", "append"],
                       "description": "read the memory file, or append one entry to it"},
            "target": {"type": "string", "enum": targets,
                       "description": "; ".join(_DESCRIPTIONS[t] for t in targets) + f". Default: {targets[0]}."},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_ENTRY_CHARS,
                     "description": "the entry to append (one self-contained fact, never a secret); required "
                                    "for append"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    async def handler(args: dict[str, Any]) -> str:
        target = args.get("target", targets[0])
        if args["action"] == "read":
            content = await store.read(target)
            return content if content.strip() else f"The {target} memory is empty."
        text = args.get("text")
        if not text:
            return "Error: 'text' is required when action is 'append'."
        if not store.may_write(target):
            others = [repr(t) for t in targets if t != "bot"]
            instead = f" Save it to {' or '.join(others)} instead." if others else ""
            return f"Error: not saved: {_WHERE[target]} is written only by the bot's operators.{instead}"
        await store.append(target, text)
        return f"Saved to {_WHERE[target]}."

    return Tool(
        name="memory",
        description=("Long-term memory that survives context compression and new sessions. Save user "
                     "preferences, constraints and exact values worth keeping; read it to recall them."),
        parameters=parameters,
        handler=handler,
        timeout_s=10.0,
        priority=1,
    )
