"""Group lines nobody addressed to the bot, on the message path.

In groups the bot answers only when mentioned, replied to or commanded (in a free-response chat, always).
Other group lines are stored in the session as they come (``gateway.group_history: observe``,
`gateway.conversation.observe`), or, in ``addressed`` mode, kept tagged with the speaker's name in a bounded
per-session buffer (``gateway.group_context_limit`` newest lines, `gateway.conversation.group_context`) and
handed to the agent in front of the next message that addresses it.
"""

from __future__ import annotations

from adapters.base import Inbound
from gateway.conversation.command_rules import Command
from gateway.conversation.group_context import GroupContext
from gateway.conversation.observe import GroupObserver
from gateway.conversation.prompt import speaker_tag
from gateway.conversation.user_messages import observed_line
from gateway.intake.inbox import Inbox
from gateway.intake.keys import SessionKey
from gateway.ops.faults import crash_point

__all__ = ["UnaddressedLines", "addressed_in_group"]


def addressed_in_group(inbound: Inbound, command: Command | None) -> bool:
    """In a group: a mention, a reply to the bot, or one of our commands (another bot's /cmd is chatter)."""
    return inbound.mentions_bot or inbound.reply_to_bot or (command is not None and command.known)


class UnaddressedLines:
    """Where a group line nobody addressed to the bot goes: the session (observing) or the group's context."""

    def __init__(self, observer: GroupObserver, context: GroupContext, inbox: Inbox, *, observing: bool) -> None:
        self.observer = observer
        self.context = context
        self.inbox = inbox
        self.observing = observing

    async def observe(self, key: SessionKey, inbound: Inbound) -> None:
        """Batched, no lock per line; stored once, with its handled mark, by whichever write comes first. Done
        only once stored: until then the inbox (or the platform) still holds it."""
        stored = self.observer.add(key, observed_line(inbound), inbound.user_id, self.inbox.marker(inbound, key))
        crash_point("observed-queued")
        await stored
        self.inbox.release(inbound)

    async def keep(self, key: SessionKey, inbound: Inbound, lead: str) -> None:
        """A line that reached the turn lock: observed, it is stored with its mark now (the lock is held
        already); otherwise it waits in the group's context for the next question."""
        if self.observing:
            self.observer.add(key, observed_line(inbound, lead), inbound.user_id, self.inbox.marker(inbound, key))
            await self.observer.flush_locked(key)
            self.inbox.release(inbound)
        else:
            self.context.add(key, speaker_tag(inbound.user_name, lead + inbound.text))
