"""``/forget``: erase everything one person wrote in this chat.

``/forget me`` erases the sender's own messages here; an admin erases someone else's with ``/forget
platform:user-id``. Every stored copy of each message becomes a tombstone, its quotes are cut out of the rest of
the chat, summaries that covered it are rebuilt or withdrawn, memory entries citing or quoting it go, and so do
the pins the person made in this chat (`gateway.conversation.erasure`). What they send afterwards is kept as usual.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from adapters.base import Inbound
from gateway.conversation.erasure import ErasureReport, ErasureRequest, erase
from gateway.conversation.session import LiveSession, SessionManager

__all__ = ["FORGET_USAGE", "forget_command"]

FORGET_USAGE = ("Usage: /forget me — erase everything you wrote in this chat; admins: /forget platform:user-id "
                "(e.g. /forget telegram:123456).")
FORGET_REFUSAL = "Sorry, only admins can make me forget someone else. /forget me erases what you wrote."
_USER_REF = re.compile(r"^[a-z]+:\S+$")


async def forget_command(sessions: SessionManager, live: LiveSession, inbound: Inbound, args: str, *, admin: bool,
                         erased: Callable[[ErasureReport], None] | None = None) -> str:
    """/forget me, or /forget platform:user-id (admins); ``erased`` hears the report (what else holds text in
    memory drops it)."""
    wanted = args.strip()
    me = f"{inbound.platform}:{inbound.user_id}"
    if wanted.lower() == "me":
        author = me
    elif _USER_REF.match(wanted):
        if wanted != me and not admin:
            return FORGET_REFUSAL
        author = wanted
    else:
        return FORGET_USAGE
    if author.partition(":")[0] != live.key.platform:
        return f"{author} is not on {live.key.platform}: this chat holds nothing they wrote."
    report = await erase(sessions, live.key, ErasureRequest(author=author))
    if erased is not None:
        erased(report)
    whose = "your" if author == me else f"{author}'s"
    return (f"Forgotten: {report.messages:,} stored cop{'y' if report.messages == 1 else 'ies'} of {whose} messages "
            f"erased here (tombstones remain), {report.quotes + report.answers:,} quote(s) cut out, "
            f"{report.summaries:,} summary(ies) rebuilt or withdrawn, {report.memory:,} memory entry(ies) and "
            f"pin(s) removed.")
