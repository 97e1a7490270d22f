"""Edits and deletions of messages still waiting for their turn in this worker.

An edit or a deletion joins its message's session queue behind the message (a later arrival ticket), so it is
handled after it. When the message has not been answered yet, its turn should run on what the sender says now:
the edited text, or nothing at all once deleted. So each edit and deletion is noted here as it arrives, before
it queues; the message's turn takes the newest note (`revise`), and the event's own turn then learns that it
was applied (`applied`) and has nothing left to do. A note the message's turn never took (the message was
answered before the event arrived) is forgotten when the event's turn asks.

Notes live in this worker's memory. Discord sends a guild's (or the DMs') events to one connection, and one
worker polls Telegram, so an event reaches the worker that received its message — except behind a load
balancer in Telegram webhook mode, where an edit may reach another worker than its message: it is then handled
as the edit of an answered message (a correction), since its ticket comes after the message's.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from adapters.base import Inbound
from gateway.intake.inbox import inbound_key, message_key

__all__ = ["Revisions"]


class Revisions:
    """The newest edit or deletion noted for each message, and the events a message's turn took."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._newest: OrderedDict[str, Inbound] = OrderedDict()  # message key → its newest edit or deletion
        self._events: dict[str, list[str]] = {}  # message key → the keys of the events noted for it
        self._applied: set[str] = set()  # event keys a message's turn took

    def note(self, event: Inbound) -> None:
        """An edit or a deletion arrived (before it queues); a deletion is never undone by a later edit."""
        key = message_key(event)
        newest = self._newest.get(key)
        if newest is None or newest.kind != "delete":
            self._newest[key] = event
        self._newest.move_to_end(key)
        self._events.setdefault(key, []).append(inbound_key(event))
        while len(self._newest) > self.limit:
            oldest, _ = self._newest.popitem(last=False)
            self._events.pop(oldest, None)

    def revise(self, message: Inbound) -> Inbound | None:
        """``message`` as its sender has left it by the time its turn runs: with the newest edit's text, None
        when it was deleted (its turn is skipped), or as it came. A command is never edited into another one."""
        key = message_key(message)
        newest = self._newest.get(key)
        if newest is None:
            return message
        if newest.kind == "edit" and (message.is_command or newest.is_command):
            return message  # the edit stays a note of its own (an edited command runs nothing)
        del self._newest[key]
        self._applied.update(self._events.pop(key, ()))
        if newest.kind == "delete":
            return None
        return dataclasses.replace(message, text=newest.text, attachments=newest.attachments,
                                   mentions_bot=message.mentions_bot or newest.mentions_bot)

    def deleted_with(self, deletion: Inbound) -> list[str]:
        """The key of ``deletion``'s message, then those of the other messages of its chat (and thread) whose
        deletion is noted here too: a moderator's bulk delete is erased at once, and each later deletion finds
        its message erased already."""
        key = message_key(deletion)
        chat = key.rsplit(":", 1)[0] + ":"
        others = [k for k, event in self._newest.items() if event.kind == "delete" and k != key and k.startswith(chat)]
        return [key, *others]

    def applied(self, event: Inbound) -> bool:
        """Whether its message's turn took ``event`` (then nothing is left to do for it); forgets the event."""
        key = inbound_key(event)
        if key in self._applied:
            self._applied.discard(key)
            return True
        message = message_key(event)
        events = self._events.get(message)
        if events is not None and key in events:
            events.remove(key)
            if not events:
                del self._events[message]
                self._newest.pop(message, None)
        return False
