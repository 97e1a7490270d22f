"""The built-in ``memory`` tool: read or append to the bot's and the user's long-term memory files.

The model uses it to keep what must outlive a compaction or a session: preferences, constraints, exact
values. Writes reach disk at once but the system prompt keeps the snapshot taken at session start.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from agent.tools.registry import Tool

__all__ = ["MAX_ENTRY_CHARS", "MemoryStore", "memory_tool"]

MAX_ENTRY_CHARS = 1_000


class MemoryStore(Protocol):
    """What the tool needs from a memory provider."""

    async def read(self, target: Literal["user", "bot"]) -> str:
        """Current content of one memory file."""
        ...

    async def append(self, target: Literal["user", "bot"], text: str) -> None:
        """Add one entry to a memory file."""
        ...


def memory_tool(store: MemoryStore, *, has_user: bool = True) -> Tool:
    """A ``memory`` tool over ``store``; without a user, only the bot's memory is offered."""
    targets = ["user", "bot"] if has_user else ["bot"]
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["read", "append"],
                       "description": "read the memory file, or append one entry to it"},
            "target": {"type": "string", "enum": targets,
                       "description": "user: facts and preferences of this user; bot: what you learned in general"},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_ENTRY_CHARS,
                     "description": "the entry to append (one self-contained fact); required for append"},
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
        await store.append(target, text)
        return f"Saved to the {target} memory."

    return Tool(
        name="memory",
        description=("Long-term memory that survives context compression and new sessions. Save user "
                     "preferences, constraints and exact values worth keeping; read it to recall them."),
        parameters=parameters,
        handler=handler,
        timeout_s=10.0,
    )
