"""EditedReply on its own, over a recording editor: throttling, clipping, 429s, and every fallback path."""

from __future__ import annotations

import asyncio

from adapters.base import ChatRef, Inbound, Outbound, SendError
from adapters.live import ChatThrottle, EditedReply, LiveRateLimited, clip_live
from adapters.split import utf16_len

TARGET = Inbound(platform="discord", chat_id="c", chat_type="dm", thread_id=None, user_id="u", user_name="U",
                 message_id="m1", text="q")


class Editor:
    limit = 100
    length = staticmethod(len)

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.fail_post = False
        self.fail_edit: Exception | None = None
        self.finish_ok = True

    async def post_live(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        if self.fail_post:
            raise SendError("refused")
        self.log.append(("post", text))
        return "live-1"

    async def edit_live(self, chat: ChatRef, message_id: str, text: str) -> None:
        if self.fail_edit is not None:
            failure, self.fail_edit = self.fail_edit, None
            raise failure
        self.log.append(("edit", text))

    async def finish_live(self, out: Outbound, message_id: str) -> bool:
        if self.finish_ok:
            self.log.append(("finish", out.text))
        return self.finish_ok

    async def deliver(self, out: Outbound) -> None:
        self.log.append(("deliver", out.text))


def test_clip_keeps_the_head_below_the_limit() -> None:
    assert clip_live("short", 100, len) == "short"
    clipped = clip_live("x" * 500, 100, len)
    assert clipped.endswith(" …") and len(clipped) <= 84
    emoji = clip_live("😀" * 300, 100, utf16_len)
    assert utf16_len(emoji) <= 84 and emoji.endswith(" …")


async def test_updates_are_coalesced_to_one_edit_per_interval() -> None:
    editor = Editor()
    live = EditedReply(editor, TARGET, ChatThrottle(0.2))  # type: ignore[arg-type]
    for i in range(1, 30):
        await live.text("w" * i)
        await asyncio.sleep(0.01)
    await live.finish("w" * 29 + "!")
    kinds = [kind for kind, _ in editor.log]
    assert kinds[0] == "post" and kinds[-1] == "finish" and 1 <= kinds.count("edit") <= 3
    assert editor.log[-1] == ("finish", "w" * 29 + "!")


async def test_a_429_skips_the_edit_and_waits() -> None:
    editor = Editor()
    throttle = ChatThrottle(0.05)
    live = EditedReply(editor, TARGET, throttle)  # type: ignore[arg-type]
    await live.text("one")
    await asyncio.sleep(0.1)
    editor.fail_edit = LiveRateLimited(0.3)
    await live.text("one two")
    await asyncio.sleep(0.1)
    assert throttle.wait_s(TARGET.chat) > 0.1  # told to wait longer than the interval
    await asyncio.sleep(0.4)
    assert editor.log[-1] == ("edit", "one two")
    await live.finish("one two three")
    assert editor.log[-1] == ("finish", "one two three")


async def test_a_failed_edit_sends_the_final_text_anew_once() -> None:
    editor = Editor()
    live = EditedReply(editor, TARGET, ChatThrottle(0.01))  # type: ignore[arg-type]
    await live.text("one")
    await asyncio.sleep(0.05)
    editor.fail_edit = SendError("gone")
    await live.text("one two")
    await asyncio.sleep(0.05)
    await live.text("one two three")  # ignored: the live message is broken
    await live.finish("final")
    assert editor.log == [("post", "one"), ("deliver", "final")]


async def test_a_refused_final_edit_or_post_falls_back_to_delivery() -> None:
    editor = Editor()
    editor.finish_ok = False
    live = EditedReply(editor, TARGET, ChatThrottle(0.01))  # type: ignore[arg-type]
    await live.text("one")
    await live.finish("final")
    assert editor.log == [("post", "one"), ("deliver", "final")]
    refused = Editor()
    refused.fail_post = True
    live = EditedReply(refused, TARGET, ChatThrottle(0.01))  # type: ignore[arg-type]
    await live.text("one")
    await live.finish("final")
    assert refused.log == [("deliver", "final")]


async def test_no_text_at_all_means_a_plain_delivery() -> None:
    editor = Editor()
    live = EditedReply(editor, TARGET, ChatThrottle(0.01))  # type: ignore[arg-type]
    await live.text("   ")
    await live.finish("answer")
    assert editor.log == [("deliver", "answer")]
