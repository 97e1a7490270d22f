"""``concord db`` and ``concord sessions``: migrations, listing, inspection, export, search, restore."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from agent.compression.redact import redact_message, redact_secrets
from gateway.config import Settings, load_settings

if TYPE_CHECKING:  # loaded by the commands that open the store, not by every `concord` command
    from gateway.store import Store

__all__ = ["add_store_commands"]

_RAW_HELP = "print stored text as it is, secrets included (default: API keys, tokens and passwords redacted)"



def _console() -> Console:
    # Piped output (scripts, grep) gets full-width rows instead of rich's 80-column truncation.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 240)


def _time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _with_store(body: Callable[[Store, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        settings: Settings = load_settings()

        async def go() -> int:
            from gateway.store import Store

            store = await Store.open(settings.storage.url)
            try:
                return await body(store, args)  # not found (session, compaction): `gateway.cli.main` says so, exit 1
            finally:
                await store.aclose()

        return asyncio.run(go())

    return run


def _db_upgrade(args: argparse.Namespace) -> int:
    from gateway.store import upgrade_database

    url = load_settings().storage.url
    asyncio.run(upgrade_database(url))
    print("database is at the latest schema")
    return 0


async def _list(store: Store, args: argparse.Namespace) -> int:
    sessions = await store.sessions.list(active_only=args.active, platform=args.platform, limit=args.limit)
    table = Table("id", "platform", "chat", "title", "messages", "tokens", "compactions", "last active", "ended")
    for s in sessions:
        table.add_row(s.id, s.platform, s.chat_key, s.title or "", str(s.message_count), f"{s.token_count:,}",
                      str(s.engine.compression_count), _time(s.last_active_at), s.end_reason or "")
    _console().print(table)
    return 0


def _shown(args: argparse.Namespace, value: Any) -> Any:
    """``value`` as printed: redacted unless the operator asked for ``--raw``."""
    return value if args.raw else redact_message(value)


async def _show(store: Store, args: argparse.Namespace) -> int:
    from gateway.app.maintenance import session_status
    from gateway.conversation.status_commands import format_status

    s = await store.sessions.require(args.id)
    for key, value in [("id", s.id), ("platform", s.platform), ("chat", s.chat_key), ("title", s.title),
                       ("goal", s.goal), ("parent", s.parent_session_id), ("started", _time(s.started_at)),
                       ("last active", _time(s.last_active_at)), ("ended", _time(s.ended_at)),
                       ("end reason", s.end_reason)]:
        _console().print(f"{key:>18}: {_shown(args, value) if value is not None else '-'}")
    # The same figures, computed the same way, as /status in the chat.
    status = format_status(await session_status(load_settings(), store, s.id))
    _console().print("\n" + _shown(args, status))
    _console().print("(the window is the one the gateway stored for this session; model and compression settings "
                     "are this command's configuration)\n")
    history = await store.compactions.history(s.id)
    if history:
        table = Table("#", "at", "reason", "messages", "tokens", "carried")
        for c in history:
            table.add_row(str(c.number), _time(c.at), _shown(args, c.reason), f"{c.messages_before} → {c.messages_after}",
                          f"{c.tokens_before:,} → {c.tokens_after:,}", str(c.carried))
        _console().print(table)
    return 0


async def _export(store: Store, args: argparse.Namespace) -> int:
    await store.sessions.require(args.id)
    for record in await store.messages.export(args.id, include_archived=args.include_archived):
        sys.stdout.write(json.dumps(_shown(args, record.message), ensure_ascii=False) + "\n")
    return 0


async def _search(store: Store, args: argparse.Namespace) -> int:
    hits = await store.search(args.text, session_id=args.session, limit=args.limit,
                              redact=None if args.raw else redact_secrets)
    if not hits:
        print("no matches")
        return 0
    table = Table("session", "seq", "time", "role", "archived", "snippet")
    for h in hits:
        table.add_row(h.session_id, str(h.seq), _time(h.created_at), h.role, "yes" if h.archived else "",
                      h.snippet)
    _console().print(table)
    return 0


async def _restore(store: Store, args: argparse.Namespace) -> int:
    number = await store.compactions.restore(args.id, args.before_compaction)
    history = {c.number: c for c in await store.compactions.history(args.id)}
    restored, now = history[args.before_compaction].messages_before, history[number].messages_after
    print(f"restored the {restored} messages from before compaction {args.before_compaction} and kept the "
          f"{now - restored} added since after them: {now} messages in view (recorded as #{number}; "
          f"`--before-compaction {number}` undoes this)")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000000")
    return value


def add_store_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``db`` and ``sessions`` subcommands on the top-level parser."""
    db = sub.add_parser("db", help="database schema", description="Manage the database schema.")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION", help="what to do with it")
    db_sub.add_parser("upgrade", help="apply Alembic migrations",
                      description="Apply the packaged Alembic migrations (also done at every start-up). "
                                  "Exit 3 when the database cannot be opened or is newer than this Concord."
                      ).set_defaults(func=_db_upgrade)

    sessions = sub.add_parser("sessions", help="inspect stored sessions",
                              description="Inspect, export, search and restore stored sessions. Exit 1 when the "
                                          "session or compaction does not exist, 3 when the database is unusable.")
    s_sub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION",
                                  help="what to do with them")
    p = s_sub.add_parser("list", help="list sessions", description="List sessions, most recently active first.")
    p.add_argument("--active", action="store_true", help="only sessions that have not ended")
    p.add_argument("--platform", choices=("discord", "telegram", "console"), help="only this platform's sessions")
    p.add_argument("--limit", type=_positive, default=50, help="at most this many rows (default 50)")
    p.set_defaults(func=_with_store(_list))
    p = s_sub.add_parser("show", help="one session, its /status figures and its compaction history",
                         description="One session: its details, the figures /status shows in the chat, and "
                                     "every compaction and restore.")
    p.add_argument("id", help="session id (from `concord sessions list`)")
    p.add_argument("--raw", action="store_true", help=_RAW_HELP)
    p.set_defaults(func=_with_store(_show))
    p = s_sub.add_parser("export", help="print a session as OpenAI JSONL",
                         description="Print the session's messages as OpenAI JSONL, one message per line.")
    p.add_argument("id", help="session id (from `concord sessions list`)")
    p.add_argument("--include-archived", action="store_true", help="also the turns compaction replaced")
    p.add_argument("--raw", action="store_true", help=_RAW_HELP)
    p.set_defaults(func=_with_store(_export))
    p = s_sub.add_parser("search", help="full-text search over all messages, archived ones included",
                         description="Full-text search over every stored message, archived ones included.")
    p.add_argument("text", help="words to find (all of them; CJK text matches as substrings)")
    p.add_argument("--session", metavar="ID", help="only this session")
    p.add_argument("--limit", type=_positive, default=20, help="at most this many hits (default 20)")
    p.add_argument("--raw", action="store_true", help=_RAW_HELP)
    p.set_defaults(func=_with_store(_search))
    p = s_sub.add_parser("restore", help="bring back the active set from before a compaction",
                         description="Make the messages compaction N replaced active again, followed by every "
                                     "turn added since; the current active set is archived, so the restore "
                                     "itself can be undone the same way.")
    p.add_argument("id", help="session id (from `concord sessions list`)")
    p.add_argument("--before-compaction", type=_positive, required=True, metavar="N",
                   help="the compaction to undo (numbers from `concord sessions show`)")
    p.set_defaults(func=_with_store(_restore))
