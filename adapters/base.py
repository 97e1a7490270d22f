"""What every platform adapter shares: the inbound/outbound types, the Adapter contract, text splitting.

An adapter turns platform events into one :class:`Inbound` type and hands each to a callback; it sends
replies split at the platform's limit. Adapters import only their platform library and this module;
they never import gateway code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from adapters.split import LengthFn, split_message, utf16_len

__all__ = [
    "Adapter",
    "Attachment",
    "ChatRef",
    "ChatType",
    "Inbound",
    "InboundHandler",
    "InboundKind",
    "KeepHandler",
    "LiveReply",
    "Outbound",
    "Platform",
    "SendError",
    "keep_alive",
    "parse_command",
    "split_message",
    "storable_text",
    "utf16_len",
]

Platform = Literal["discord", "telegram", "console"]
ChatType = Literal["dm", "group", "channel", "thread"]
# What an inbound event is: a new message, a new text for message ``message_id`` (an edit), or its deletion.
InboundKind = Literal["message", "edit", "delete"]

log = logging.getLogger(__name__)

# NUL (PostgreSQL text refuses it) and lone UTF-16 surrogates (no UTF-8 form; JSON and tokenizers choke).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_COMMAND = re.compile(r"/([A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?)(?:\s+(.*))?$", re.DOTALL)


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD, so every backend stores the same string.

    One UTF-16 unit is replaced by one, so Telegram's entity offsets stay valid.
    """
    return _UNSTORABLE.sub("\ufffd", text)


class SendError(Exception):
    """A reply could not be delivered after the adapter's own bounded retries."""


@dataclass(frozen=True)
class Attachment:
    """A file sent with a message: a fetchable ``url`` (Discord CDN) or an inline ``data_url``."""

    kind: Literal["image", "file"]
    mime: str
    size: int
    name: str
    url: str | None = None
    data_url: str | None = None


@dataclass(frozen=True)
class ChatRef:
    """Where a message goes: a chat, and inside it optionally a thread (Discord thread, Telegram topic)."""

    platform: Platform
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True)
class Inbound:
    """One user message, platform-neutral. ``text`` has the bot's own @mention removed.

    An edit (``kind="edit"``) carries message ``message_id`` as it reads now, and ``edit_id`` tells that edit from
    the message's other edits. A deletion (``kind="delete"``) carries no text, and ``user_id`` / ``user_name``
    are empty when the platform does not say who wrote the deleted message.
    """

    platform: Platform
    chat_id: str
    chat_type: ChatType
    thread_id: str | None
    user_id: str
    user_name: str
    message_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    mentions_bot: bool = False
    reply_to_bot: bool = False
    is_command: bool = False
    command: str | None = None
    command_args: str = ""
    is_admin_hint: bool = False
    received_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    # Where the platform has them (Discord): the server and the sender's roles there, for access control.
    guild_id: str | None = None
    role_ids: tuple[str, ...] = ()
    kind: InboundKind = "message"
    # The platform's identity of one edit (its edit time, its update id), the same when the edit is delivered again.
    edit_id: str = ""

    def __post_init__(self) -> None:
        # Text enters here from every platform: made storable once, before anything (a paid turn) uses it.
        for name in ("text", "user_name", "command_args"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"Inbound.{name} must be text, not {type(value).__name__}")
            object.__setattr__(self, name, storable_text(value))

    @property
    def chat(self) -> ChatRef:
        """The chat (and thread) this message came from, which is where a reply goes."""
        return ChatRef(self.platform, self.chat_id, self.thread_id)

    @property
    def addressed(self) -> bool:
        """True when the bot is spoken to: a DM, a mention, a reply to the bot, or a command."""
        return self.chat_type == "dm" or self.mentions_bot or self.reply_to_bot or self.is_command


@dataclass(frozen=True)
class Outbound:
    """A reply to deliver: text for a chat/thread, optionally answering one message."""

    chat: ChatRef
    text: str
    reply_to_message_id: str | None = None
    continuation_prefix: str = ""

    @classmethod
    def to(cls, target: Inbound | ChatRef, text: str) -> Outbound:
        """A reply to ``target``: an Inbound is answered in place (reply reference), a ChatRef plainly."""
        if isinstance(target, Inbound):
            return cls(target.chat, text, reply_to_message_id=target.message_id)
        return cls(target, text)


InboundHandler = Callable[[Inbound], Awaitable[None]]
# Makes received messages durable (the gateway's inbox) in one write; raises when it cannot right now.
KeepHandler = Callable[[Sequence[Inbound]], Awaitable[None]]


class LiveReply(ABC):
    """A reply shown while the turn runs; the gateway hands it to the agent loop as the turn's stream."""

    @abstractmethod
    async def text(self, text: str) -> None:
        """The answer so far (the whole text of the current model call)."""

    @abstractmethod
    async def status(self, text: str) -> None:
        """A short status line for a tool round, shown in place of the answer so far."""

    @abstractmethod
    async def finish(self, text: str) -> None:
        """Deliver the final ``text`` exactly (replacing what was shown live); call once."""


def parse_command(text: str, bot_username: str | None = None) -> tuple[str, str] | None:
    """``("compress", "focus text")`` for ``/compress@bot focus text``; None when not a command for us.

    A command suffixed with another bot's name (``/new@otherbot``) is not ours.
    """
    match = _COMMAND.match(text)
    if match is None:
        return None
    name, at, target = match.group(1).partition("@")
    if at and (bot_username is None or target.lower() != bot_username.lower()):
        return None
    return name.lower(), (match.group(2) or "").strip()


@contextlib.asynccontextmanager
async def keep_alive(action: Callable[[], Awaitable[object]], interval: float, what: str) -> AsyncIterator[None]:
    """Run ``action`` now and every ``interval`` seconds while the block runs; failures are only logged.

    Used for typing indicators, which expire on the platform side (Discord ~10 s, Telegram ~5 s).
    """

    async def loop() -> None:
        while True:
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s failed: %s", what, type(exc).__name__)
            await asyncio.sleep(interval)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Adapter(ABC):
    """A platform connection: receive messages into a callback, send split replies, show typing."""

    name: str
    limit: int
    length: LengthFn = staticmethod(len)

    def __init__(self) -> None:
        self._handler: InboundHandler | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Set by the gateway before `start`. An adapter whose platform will not deliver a message again (Discord;
        # polled Telegram once the offset is confirmed) awaits it before the platform may forget the message.
        self.keep: KeepHandler | None = None

    # Whether the platform sends a message again for as long as the adapter has not confirmed it (Telegram: the
    # getUpdates offset, a webhook's answer), so an unkept message can wait there. Where it does not (Discord),
    # the gateway's `keep` falls back to a local spool instead of failing while the database is down.
    redelivers: bool = True

    @abstractmethod
    async def start(self, on_message: InboundHandler) -> None:
        """Connect and begin delivering inbound messages to ``on_message``; returns once connected."""

    @abstractmethod
    async def stop(self) -> None:
        """Disconnect; idempotent."""

    @property
    def connected(self) -> bool:
        """Whether the platform connection is up (``/readyz``); adapters with a connection override it."""
        return self._handler is not None

    async def stop_receiving(self) -> None:
        """First step of a graceful shutdown: hand nothing more to the callback; sending still works.

        What is already dispatched reaches the callback first. Platforms that redeliver (Telegram) override
        this to stop fetching, so what arrives from now on waits there for the next process.
        """
        self._handler = None
        await asyncio.sleep(0)  # let dispatched handler tasks take their first step into the callback

    async def wait_failed(self) -> BaseException:
        """Return (with the cause) once the connection is lost for good; never for adapters without one.

        The gateway waits on this beside its shutdown signal and exits non-zero when it returns, so the service
        manager restarts the process instead of leaving one that answers nobody.
        """
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    @abstractmethod
    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        """Keep the platform's typing indicator on in ``chat`` while the block runs."""

    def live_reply(self, target: Inbound) -> LiveReply | None:
        """A reply to ``target`` that shows the answer as it grows, or None where this adapter (or its settings)
        does not stream: then the caller sends the final text."""
        return None

    @abstractmethod
    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        """Send one chunk that already fits the platform limit (with the adapter's own retries)."""

    async def send(self, target: Inbound | ChatRef, text: str) -> None:
        """Send ``text`` to ``target``, split at the platform limit; an Inbound is replied to."""
        await self.deliver(Outbound.to(target, text))

    async def deliver(self, out: Outbound) -> None:
        """Send an Outbound: the reply reference goes on the first chunk only."""
        chunks = split_message(out.text, self.limit, self.length, out.continuation_prefix)
        for index, chunk in enumerate(chunks):
            await self._send_chunk(out.chat, chunk, out.reply_to_message_id if index == 0 else None)

    def replay(self, inbound: Inbound) -> None:
        """Hand ``inbound`` to the callback once more, as if just received (a message the gateway's inbox took
        over from a worker that died)."""
        self._dispatch(inbound)

    def _dispatch(self, inbound: Inbound) -> None:
        """Hand ``inbound`` to the callback in its own task, so a slow turn never stalls the platform."""
        if self._handler is None:
            log.warning("%s: message %s arrived while shutting down; not handled", self.name, inbound.message_id)
            return
        task = asyncio.create_task(self._run_handler(self._handler, inbound))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_handler(self, handler: InboundHandler, inbound: Inbound) -> None:
        try:
            await handler(inbound)
        except Exception:
            log.exception("%s: message handler failed for message %s", self.name, inbound.message_id)

    async def _drain(self, grace_s: float) -> None:
        """Let in-flight handler tasks finish (so their replies go out), cancelling any past ``grace_s``."""
        pending = set(self._tasks)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=grace_s)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
