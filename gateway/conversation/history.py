"""Whole-message recall: the ``read_history`` tool opens one stored message of this conversation by number.

``search_history`` finds where an exact value was; its snippet may not hold the value itself (the value sits
a few lines below the words the model thought of). The summary's ledger and every search hit cite message
numbers (``#57``); this tool returns that message whole — paged by characters, with "N more characters"
when cut — and, on request, the messages just before and after it. Same scope as ``search_history``: this
chat's sessions only (the current one and its ancestors through rotation), never another chat or another
user's DM. Offsets count characters of the stored text; each page is redacted with a margin around it, and
widened to whole lines where a secret crosses its edge, so no page shows part of one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.compression.redact_window import redacted_slice
from agent.tools.registry import Tool
from gateway.conversation.recall import READ_TOOL, conversation_sessions
from gateway.store import MessageRecord, Store, message_text

__all__ = ["DEFAULT_PAGE_CHARS", "MAX_NEIGHBOURS", "MAX_PAGE_CHARS", "READ_TOOL", "read_history_tool"]

DEFAULT_PAGE_CHARS = 4_000
MAX_PAGE_CHARS = 8_000
MIN_PAGE_CHARS = 200
MAX_NEIGHBOURS = 5
_NEIGHBOUR_CHARS = 800
_MAX_RESULT_CHARS = MAX_PAGE_CHARS + 2 * MAX_NEIGHBOURS * (_NEIGHBOUR_CHARS + 200) + 500


def _header(record: MessageRecord, current: str, length: int) -> str:
    where = ("in view" if record.session_id == current else "earlier session") if record.active else "archived"
    return (f"#{record.seq} {record.role}, {record.created_at:%Y-%m-%d %H:%M} UTC, {where} — "
            f"{length:,} characters")


def _page(text: str, offset: int, size: int, seq: int) -> str:
    """Characters ``[offset, offset + size)`` of ``text`` with secrets redacted — only that range and a margin
    is redacted (`redacted_slice`), so a page of a 1 MB message costs what a short message does; the range
    widens to whole lines when a secret crosses its edge, and the next page starts where this one ended."""
    _, end, page = redacted_slice(text, offset, offset + size)
    rest = len(text) - end
    if rest > 0:
        page += f"\n[… {rest:,} more characters: call {READ_TOOL} with number={seq} offset={end}]"
    return page


def _render(record: MessageRecord, current: str, *, offset: int, size: int) -> str:
    text = message_text(record.message)
    if offset and offset >= len(text):
        return f"{_header(record, current, len(text))}\nNothing at offset {offset:,}: the message is shorter."
    return f"{_header(record, current, len(text))}\n{_page(text, offset, size, record.seq)}"


def read_history_tool(store: Store, session_id_getter: Callable[[], str]) -> Tool:
    """The ``read_history`` tool for one conversation; ``session_id_getter`` names its current session
    (read at each call, so a rotation mid-conversation is followed)."""
    parameters = {
        "type": "object",
        "properties": {
            "number": {"type": "integer", "minimum": 1,
                       "description": "the message number (#N in search_history hits and in the summary)"},
            "offset": {"type": "integer", "minimum": 0, "default": 0,
                       "description": "character offset to start from, to read on where a page was cut"},
            "max_chars": {"type": "integer", "minimum": MIN_PAGE_CHARS, "maximum": MAX_PAGE_CHARS,
                          "default": DEFAULT_PAGE_CHARS, "description": "page size in characters"},
            "before": {"type": "integer", "minimum": 0, "maximum": MAX_NEIGHBOURS, "default": 0,
                       "description": "also show this many messages just before it (each shortened)"},
            "after": {"type": "integer", "minimum": 0, "maximum": MAX_NEIGHBOURS, "default": 0,
                      "description": "also show this many messages just after it (each shortened)"},
        },
        "required": ["number"],
        "additionalProperties": False,
    }

    async def handler(args: dict[str, Any]) -> str:
        number = int(args["number"])
        before, after = int(args.get("before", 0)), int(args.get("after", 0))
        current = session_id_getter()
        scope = await conversation_sessions(store, current)
        records = await store.messages.around(scope, number, before=before, after=after)
        target = next((r for r in records if r.seq == number), None)
        if target is None:
            return (f"No message #{number} in this conversation. Message numbers come from search_history "
                    f"hits and the summary's lists.")
        blocks = []
        for record in records:
            if record is target:
                blocks.append(_render(record, current, offset=int(args.get("offset", 0)),
                                      size=int(args.get("max_chars", DEFAULT_PAGE_CHARS))))
            else:
                blocks.append(_render(record, current, offset=0, size=_NEIGHBOUR_CHARS))
        return "\n\n".join(blocks)

    return Tool(
        name=READ_TOOL,
        description=("Open one earlier message of this conversation whole, by its number (#N from "
                     "search_history hits or from the compaction summary), to read exact values a snippet "
                     "or the summary left out. Long messages come in pages (offset, max_chars); before/after "
                     "add the neighbouring messages."),
        parameters=parameters,
        handler=handler,
        timeout_s=10.0,
        priority=2,
        max_result_chars=_MAX_RESULT_CHARS,
    )
