"""Replies shown as they grow: one platform message edited while the answer streams, then its exact final text.

`EditedReply` is the platform-neutral part: it throttles edits (at most one per ``interval`` per chat, longer
when the platform answers 429), clips the live text below the platform limit, and at the end hands the final
text to the adapter, which re-renders it properly (Telegram HTML, fence-aware splitting) into the same message
plus new ones for the rest. If the live message cannot be edited any more (deleted, too old, refused), the final
text goes out as new messages instead. What was posted is never posted again: an edit in flight is always
waited for, never abandoned, so its message is known.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from adapters.base import ChatRef, Inbound, LiveReply, Outbound

__all__ = ["ChatThrottle", "EditedReply", "LiveEditor", "LiveRateLimited", "clip_live"]

log = logging.getLogger(__name__)

ELLIPSIS = " …"


class LiveRateLimited(Exception):
    """The platform asked to wait ``retry_after`` seconds before the next edit (the edit was skipped)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after:.1f} s")
        self.retry_after = retry_after


class ChatThrottle:
    """When each chat may next be edited; bounded to the ``max_chats`` most recently edited chats."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic, max_chats: int = 4096) -> None:
        self.interval = interval
        self._clock = clock
        self._max = max_chats
        self._next: OrderedDict[ChatRef, float] = OrderedDict()

    def wait_s(self, chat: ChatRef) -> float:
        """Seconds until ``chat`` may be edited again (0 when it may now)."""
        return max(0.0, self._next.get(chat, 0.0) - self._clock())

    def edited(self, chat: ChatRef, extra_wait: float = 0.0) -> None:
        """Note an edit (or a 429 asking for ``extra_wait``) in ``chat`` now."""
        self._next[chat] = self._clock() + max(self.interval, extra_wait)
        self._next.move_to_end(chat)
        while len(self._next) > self._max:
            self._next.popitem(last=False)


def clip_live(text: str, limit: int, length: Callable[[str], int]) -> str:
    """``text`` cut to fit one message of ``limit`` (in the platform's ``length`` unit) with room to spare,
    ending in `` …`` when cut."""
    room = limit - 16
    if length(text) <= room:
        return text
    budget = room - len(ELLIPSIS)
    cut = text[:budget]
    while length(cut) > budget:  # a character is 1 or 2 units: halving the excess converges
        cut = cut[: len(cut) - max(1, (length(cut) - budget) // 2)]
    return cut.rstrip() + ELLIPSIS


class LiveEditor(Protocol):
    """What an adapter offers an `EditedReply`: post and edit one message, and finish it."""

    limit: int
    length: Callable[[str], int]

    async def post_live(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        """Post the live message (plain text); return its id. Raises SendError."""

    async def edit_live(self, chat: ChatRef, message_id: str, text: str) -> None:
        """One edit attempt (plain text). Raises LiveRateLimited to skip it, SendError when the message is gone."""

    async def finish_live(self, out: Outbound, message_id: str) -> bool:
        """Put the final text into the live message (rendered, first chunk) and send the rest; False when the
        live message could not be edited (nothing was sent then)."""

    async def deliver(self, out: Outbound) -> None:
        """Send ``out`` as new messages."""


class EditedReply(LiveReply):
    """A live reply over one edited message (see the module docstring)."""

    def __init__(self, editor: LiveEditor, target: Inbound, throttle: ChatThrottle) -> None:
        self._editor = editor
        self._target = target
        self._throttle = throttle
        self._wanted = ""
        self._shown = ""
        self._message_id: str | None = None
        self._broken = False
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None

    async def text(self, text: str) -> None:
        self._want(text)

    async def status(self, text: str) -> None:
        self._want(text)

    def _want(self, text: str) -> None:
        if self._closing or self._broken or not text.strip():
            return
        self._wanted = clip_live(text, self._editor.limit, self._editor.length)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        chat = self._target.chat
        while self._wanted != self._shown and not self._broken:
            wait = self._throttle.wait_s(chat)
            if wait > 0:
                if self._closing:
                    return  # the final text follows at once; an intermediate edit would only cost a request
                await asyncio.sleep(wait)
                continue
            wanted = self._wanted
            try:
                if self._message_id is None:
                    self._message_id = await self._editor.post_live(chat, wanted, self._target.message_id)
                else:
                    await self._editor.edit_live(chat, self._message_id, wanted)
            except LiveRateLimited as limited:
                self._throttle.edited(chat, limited.retry_after)
                continue
            except Exception as exc:
                log.warning("live reply: update failed (%s: %s); the final text will be sent anew", type(exc).__name__,
                            exc)
                self._broken = True
                return
            self._throttle.edited(chat)
            self._shown = wanted

    async def finish(self, text: str) -> None:
        self._closing = True
        if self._flusher is not None:
            await self._flusher  # never abandon an edit in flight: its message must be known
        out = Outbound.to(self._target, text)
        if self._message_id is not None and not self._broken:
            if await self._editor.finish_live(out, self._message_id):
                return
            log.warning("live reply: the live message could not be edited; sending the final text anew")
        await self._editor.deliver(out)
