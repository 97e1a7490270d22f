"""Lossless recall (docs/rules.md §8): the ``search_history`` tool over the turns a compaction took out of view.

A summary keeps the gist but drops exact values (ids, numbers, error strings, constraints). The store keeps
every replaced row, searchable; this tool lets the model look them up. It searches only the current
conversation: the session's archived rows and, after rotations, its ancestor sessions (same chat only) —
never another chat, since chats belong to different users and groups. Rows the model already sees (the
session's active set) are left out. Secrets are redacted before a snippet is cut, so none is shown in part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.compression.redact import redact_secrets
from agent.tools.registry import Tool
from gateway.store import SearchHit, Store
from gateway.store.search import Rerank

__all__ = ["MAX_ANCESTORS", "MAX_QUERY_CHARS", "RECALL_TOOL", "conversation_sessions", "recall_tool"]

RECALL_TOOL = "search_history"
READ_TOOL = "read_history"  # gateway.conversation.history's tool, which opens a hit whole
MAX_ANCESTORS = 20
MAX_QUERY_CHARS = 200
DEFAULT_LIMIT = 8
MAX_LIMIT = 20
_MAX_RESULT_CHARS = 6_000


async def conversation_sessions(store: Store, session_id: str, max_ancestors: int = MAX_ANCESTORS) -> list[str]:
    """``session_id`` and its ancestors (newest first) through ``parent_session_id``, at most
    ``max_ancestors`` of them, stopping at any session of another chat; empty if the session is unknown."""
    current = await store.sessions.get(session_id)
    if current is None:
        return []
    ids = [current.id]
    parent = current.parent_session_id
    while parent is not None and parent not in ids and len(ids) <= max_ancestors:
        record = await store.sessions.get(parent)
        # Rotation keeps the chat; a parent of another chat would be a corrupt row, never a reason to leak.
        if record is None or (record.platform, record.chat_key) != (current.platform, current.chat_key):
            break
        ids.append(record.id)
        parent = record.parent_session_id
    return ids


def _hit_line(hit: SearchHit) -> str:
    # The current session's active rows are never hits, so a row still active lives in an ancestor session.
    where = "archived" if hit.archived else "earlier session"
    line = f"[#{hit.seq} {hit.role}, {hit.created_at:%Y-%m-%d %H:%M}, {where}, {hit.match}] {hit.snippet}"
    if hit.more_at is not None:
        line += f" [line cut: {READ_TOOL} number={hit.seq} offset={hit.more_at} reads on]"
    return line


def recall_tool(store: Store, session_id_getter: Callable[[], str], rerank: Rerank | None = None) -> Tool:
    """The ``search_history`` tool for one conversation; ``session_id_getter`` names its current session
    (read at each call, so a rotation mid-conversation is followed). ``rerank`` (`gateway.conversation.rerank`) orders
    the hits that share only some of the query's words by meaning."""
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                      "description": "a few distinctive words, a question, or an exact fragment (an id, a "
                                     "number, an error line); messages with every word come first, then those "
                                     "with some of them; words match as prefixes"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                      "description": f"how many matches to return (default {DEFAULT_LIMIT})"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    async def handler(args: dict[str, Any]) -> str:
        query = " ".join(str(args["query"]).split())
        if not query:
            return "Error: the query is empty. Give a few words or an exact fragment to look for."
        shown = redact_secrets(query)
        current = session_id_getter()
        scope = await conversation_sessions(store, current)
        hits = await store.search(query, session_ids=scope, skip_active_of=current,
                                  limit=int(args.get("limit", DEFAULT_LIMIT)), redact=redact_secrets, rerank=rerank)
        if not hits:
            return f"No earlier messages match {shown!r}."
        lines = [f"{len(hits)} earlier message(s) match {shown!r}, most relevant first (times UTC):"]
        lines += [_hit_line(hit) for hit in hits]
        return "\n".join(lines)

    return Tool(
        name=RECALL_TOOL,
        description=("Look up exact details from earlier in this conversation that were compacted away into "
                     "a summary: ids, numbers, names, error messages, constraints, decisions. Returns "
                     "matching message snippets (their whole lines) with their time, best first; search "
                     "again with other words if needed, or open a message whole with read_history."),
        parameters=parameters,
        handler=handler,
        timeout_s=10.0,
        priority=3,
        max_result_chars=_MAX_RESULT_CHARS,
    )
