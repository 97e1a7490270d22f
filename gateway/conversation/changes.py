"""Edits and deletions on the message path, for the router.

Both are queued in the session of the message they change, behind it (a later arrival ticket), and handled
under its turn lock like any message: de-duplicated by a key of their own (`gateway.intake.inbox.inbound_key`), kept in
the inbox until handled, taken over when their worker dies. On arrival each is noted (`Revisions`), so a message
whose turn is still to come runs on its newest text, or not at all once deleted.

Under the lock, a deletion erases the message everywhere (`gateway.conversation.erasure`). An edit the message's turn took is
done; any other edit is a correction of a message handled already: ``Ann edited their message #57: …`` (the
number the store gave the message, which ``read_history`` opens), stored, and answered when it addresses the
bot — a new message from there on. An edit never runs a command.
"""

from __future__ import annotations

import dataclasses
import logging

from adapters.base import Inbound
from gateway.conversation.erasure import ErasureRequest, erase
from gateway.conversation.group_context import GroupContext
from gateway.conversation.observe import GroupObserver
from gateway.conversation.quotes import quotes
from gateway.conversation.session import SessionManager
from gateway.conversation.user_messages import correction_lead
from gateway.intake.inbox import message_key
from gateway.intake.keys import Scope, SessionKey, session_key
from gateway.intake.revisions import Revisions

__all__ = ["MessageChanges"]

log = logging.getLogger(__name__)


class MessageChanges:
    """The router's side of edits and deletions: which session they join, and what each comes to under the
    turn lock."""

    def __init__(self, sessions: SessionManager, observer: GroupObserver, context: GroupContext, *,
                 observing: bool) -> None:
        self.sessions = sessions
        self.observer = observer
        self.context = context
        self.observing = observing
        self.revisions = Revisions()

    async def session_of(self, event: Inbound, scope: Scope) -> SessionKey:
        """The session ``event`` joins: its message's. A deletion may not say who wrote the message (a per-user
        session), so the store's record of where the message went comes first."""
        if event.kind == "delete":
            located = await self.sessions.rt.store.erasure.locate(message_key(event))
            if located is not None:
                platform, _, chat_key = located.partition(":")
                return SessionKey(platform, chat_key)
        return session_key(event, scope)

    async def revised(self, key: SessionKey, inbound: Inbound) -> tuple[Inbound, str] | None:
        """What a message or an edit comes to once its turn is here, with the lead its text takes; None when
        nothing is left to do (a message deleted before its turn, an edit its message's turn took, a command)."""
        if inbound.kind == "message":
            revised = self.revisions.revise(inbound)
            if revised is None:
                log.info("message %s in %s was deleted before its turn; not answered", inbound.message_id, key)
            return None if revised is None else (revised, "")
        if self.revisions.applied(inbound) or inbound.is_command:
            return None
        number = await self.sessions.rt.store.messages.number_of(message_key(inbound))
        correction = dataclasses.replace(inbound, attachments=())
        return correction, correction_lead(inbound, number, group=key.is_group)

    async def erase(self, key: SessionKey, deletion: Inbound) -> None:
        """A deletion's turn: group lines still waiting for their batch are stored first, then the message — with
        every other message of the chat whose deletion is waiting too — is erased everywhere, and dropped from the
        lines kept for the next question (``group_history: addressed``). A message still to be handled is
        found by nothing here, and skipped by its own turn (`Revisions.revise`)."""
        self.revisions.applied(deletion)
        if self.observing and key.is_group:
            await self.observer.flush_locked(key)
        report = await erase(self.sessions, key, ErasureRequest(keys=tuple(self.revisions.deleted_with(deletion))))
        self.context.drop(key, lambda line: quotes(line, report.cuts))
