"""The Telegram adapter driven through the real python-telegram-bot client against the fake Bot API, which
parses HTML like Telegram (formatted replies, their re-splitting and plain-text fallback are at the end)."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest

from adapters.base import ChatRef, Inbound, Outbound, SendError, split_message, utf16_len
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from tests.adapters.test_split import _content
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram

StartFn = Callable[..., Awaitable[TelegramAdapter]]


@pytest.fixture
async def start_telegram(telegram_settings: TelegramSettings) -> AsyncIterator[StartFn]:
    """Start a TelegramAdapter on the fake with settings overrides; stopped after the test."""
    started: list[TelegramAdapter] = []

    async def start(inbox: Inbox, **overrides: Any) -> TelegramAdapter:
        adapter = TelegramAdapter(replace(telegram_settings, **overrides))
        await adapter.start(inbox)
        started.append(adapter)
        return adapter

    yield start
    for adapter in started:
        await adapter.stop()


def _long_answer() -> str:
    prose = "\n\n".join(f"Paragraph {i}: the cache 😀 keeps warm entries. " * 6 for i in range(20))
    code = "\n".join(f"    result_{i} = compute({i})  # step {i}" for i in range(120))
    return f"{prose}\n\n```python\ndef main():\n{code}\n```\n\nThat is all."


async def test_group_mention_reply_arrives_as_valid_chunks(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    answer = _long_answer()
    assert len(answer) > 9000
    adapter: TelegramAdapter | None = None

    async def reply(inbound: Inbound) -> None:
        assert adapter is not None
        await adapter.send(inbound, answer)

    inbox = Inbox(reply)
    adapter = await start_telegram(inbox)
    sent = fake_telegram.inject_message("@testbot please explain the cache", user_name="alice")
    [inbound] = await inbox.wait_for(1)
    assert (inbound.platform, inbound.chat_type, inbound.chat_id) == ("telegram", "group", "-100123")
    assert inbound.mentions_bot and inbound.addressed and not inbound.is_command
    assert inbound.text == "please explain the cache"
    assert (inbound.user_id, inbound.user_name) == ("42", "alice")
    assert inbound.message_id == str(sent["message_id"])

    chunks = await fake_telegram.wait_for_messages(3)
    await asyncio.sleep(0.2)
    chunks = fake_telegram.sent_messages
    # Sent as HTML (the fake parses it like Telegram): each chunk within the limit and its code block closed.
    assert all(c.parse_mode == "HTML" and utf16_len(c.text) <= 4096 for c in chunks)
    assert all(c.text.count("<pre>") == c.text.count("</pre>") for c in chunks)
    assert chunks[0].reply_to_message_id == sent["message_id"]
    assert all(c.reply_to_message_id is None for c in chunks[1:])
    assert _content("".join(c.visible_text for c in chunks)) == _content(answer)
    assert any(c.text.startswith('<pre><code class="language-python">') for c in chunks[1:])


async def test_unaddressed_chatter_and_replies_to_bot(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox)
    fake_telegram.inject_message("just chatting about lunch", user_id=7, user_name="bob")
    fake_telegram.inject_message("and what about dinner?", reply_to_bot=True)
    fake_telegram.inject_message("hello bot", chat_id=42, chat_type="private")
    chatter, reply, dm = await inbox.wait_for(3)
    assert not (chatter.mentions_bot or chatter.reply_to_bot or chatter.addressed)
    assert chatter.text == "just chatting about lunch" and chatter.user_name == "bob"
    assert reply.reply_to_bot and reply.addressed and not reply.mentions_bot
    assert dm.chat_type == "dm" and dm.addressed
    assert fake_telegram.sent_messages == []


async def test_forum_topics_are_separate_threads(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter: TelegramAdapter | None = None

    async def reply(inbound: Inbound) -> None:
        assert adapter is not None
        await adapter.send(inbound, f"answer in {inbound.thread_id}")

    inbox = Inbox(reply)
    adapter = await start_telegram(inbox)
    fake_telegram.inject_message("@testbot topic five", thread_id=5)
    fake_telegram.inject_message("@testbot topic seven", thread_id=7)
    fake_telegram.inject_message("@testbot general topic")
    five, seven, general = await inbox.wait_for(3)
    assert (five.chat_type, five.thread_id) == ("thread", "5")
    assert (seven.chat_type, seven.thread_id) == ("thread", "7")
    assert (general.chat_type, general.thread_id) == ("group", None)
    assert five.chat_id == seven.chat_id == general.chat_id
    sent = await fake_telegram.wait_for_messages(3)
    assert {(m.message_thread_id, m.text) for m in sent} == {
        (5, "answer in 5"), (7, "answer in 7"), (None, "answer in None")}


async def test_commands_with_bot_suffix(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox)
    fake_telegram.inject_message("/compress@testbot focus text")
    fake_telegram.inject_message("/new@otherbot")
    fake_telegram.inject_message("/status", chat_id=42, chat_type="private")
    ours, other, plain = await inbox.wait_for(3)
    assert (ours.is_command, ours.command, ours.command_args) == (True, "compress", "focus text")
    assert ours.addressed
    assert not other.is_command and other.command is None
    assert (plain.command, plain.command_args) == ("status", "")


async def test_chat_admin_check_is_cached(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox, check_chat_admins=True)
    fake_telegram.chat_admins.add((-100123, 42))
    fake_telegram.inject_message("/compress", user_id=42)
    fake_telegram.inject_message("/compress", user_id=43)
    fake_telegram.inject_message("/status", user_id=42)
    fake_telegram.inject_message("no command here", user_id=44)
    admin, member, admin_again, chatter = await inbox.wait_for(4)
    assert admin.is_admin_hint and admin_again.is_admin_hint
    assert not member.is_admin_hint and not chatter.is_admin_hint
    assert fake_telegram.calls.count("getChatMember") == 2


async def test_admin_check_off_by_default(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox)
    fake_telegram.chat_admins.add((-100123, 42))
    fake_telegram.inject_message("/compress", user_id=42)
    [inbound] = await inbox.wait_for(1)
    assert not inbound.is_admin_hint and "getChatMember" not in fake_telegram.calls


async def test_retry_after_is_waited_out(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox())
    fake_telegram.fail_next("sendMessage", times=1, retry_after=1)
    started = time.monotonic()
    await adapter.send(ChatRef("telegram", "-100123"), "x" * 5000)
    assert time.monotonic() - started >= 0.9
    assert [len(m.text) for m in fake_telegram.sent_messages] == [4096, 904]


async def test_retry_after_over_the_limit_gives_up(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox(), max_retry_wait=5.0)
    fake_telegram.fail_next("sendMessage", times=1, retry_after=120)
    with pytest.raises(SendError, match="wait 120"):
        await adapter.send(ChatRef("telegram", "-100123"), "hello")


async def test_refused_and_unreachable_sends_raise_send_error(
    fake_telegram: FakeTelegram, start_telegram: StartFn
) -> None:
    adapter = await start_telegram(Inbox(), max_retry_attempts=2)
    fake_telegram.blocked_chats.add("42")
    with pytest.raises(SendError, match="blocked"):
        await adapter.send(ChatRef("telegram", "42"), "hello")
    await fake_telegram.stop()
    with pytest.raises(SendError, match="after 2 attempts") as failure:
        await adapter.send(ChatRef("telegram", "-100123"), "hello")
    assert fake_telegram.token.split(":")[1] not in str(failure.value)


async def test_typing_is_refreshed_in_the_topic(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox())
    async with adapter.typing(ChatRef("telegram", "-100123", "5")):
        await asyncio.sleep(0.5)
    count = len(fake_telegram.chat_actions)
    assert count >= 2
    assert {(a["action"], a["message_thread_id"]) for a in fake_telegram.chat_actions} == {("typing", "5")}
    await asyncio.sleep(0.4)
    assert len(fake_telegram.chat_actions) == count


async def test_malformed_updates_are_skipped(
    fake_telegram: FakeTelegram, start_telegram: StartFn, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    await start_telegram(inbox, max_inbound_chars=16_000)
    good = fake_telegram.make_message("kept")
    fake_telegram.inject_update({"message": {"message_id": 5, "text": "no chat, no date"}})
    fake_telegram.inject_update({"some_future_update": {"x": 1}})
    fake_telegram.inject_update({"edited_message": {"message_id": 6, "text": "no chat, no date", "edit_date": 1}})
    fake_telegram.inject_message("z" * 20_000)
    fake_telegram.inject_update({"message": {**good, "text": None, "sticker": {"file_id": "s"}}})
    fake_telegram.inject_update({"message": good})
    [inbound] = await inbox.wait_for(1)
    assert inbound.text == "kept"
    fake_telegram.inject_message("still alive")
    messages = await inbox.wait_for(2)
    assert [m.text for m in messages] == ["kept", "still alive"]
    assert "skipping malformed update" in caplog.text
    assert "skipping message" in caplog.text  # the 20,000-character one


async def test_handler_exception_does_not_stop_the_adapter(
    fake_telegram: FakeTelegram, start_telegram: StartFn
) -> None:
    async def explode(inbound: Inbound) -> None:
        if inbound.text == "boom":
            raise RuntimeError("handler bug")

    inbox = Inbox(explode)
    await start_telegram(inbox)
    fake_telegram.inject_message("boom")
    await inbox.wait_for(1)
    fake_telegram.inject_message("after")
    assert [m.text for m in await inbox.wait_for(2)] == ["boom", "after"]


async def test_bots_ignored_unless_allowed(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox)
    fake_telegram.inject_message("from a bot", is_bot=True)
    fake_telegram.inject_message("from a human")
    [inbound] = await inbox.wait_for(1)
    await asyncio.sleep(0.2)
    assert [m.text for m in inbox.messages] == ["from a human"] == [inbound.text]


async def test_photo_arrives_as_data_url(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    fake_telegram.files["photo1"] = b"\xff\xd8fake-jpeg-bytes"
    inbox = Inbox()
    await start_telegram(inbox)
    fake_telegram.inject_message("@testbot what is this?", photo_file_id="photo1")
    [inbound] = await inbox.wait_for(1)
    assert inbound.mentions_bot and inbound.text == "what is this?"
    [attachment] = inbound.attachments
    assert attachment.kind == "image" and attachment.url is None
    assert attachment.data_url is not None
    assert base64.b64decode(attachment.data_url.split(",", 1)[1]) == b"\xff\xd8fake-jpeg-bytes"


async def test_photo_problems_keep_the_message(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    fake_telegram.files["big"] = b"x" * 64
    inbox = Inbox()
    await start_telegram(inbox, max_attachment_bytes=32)
    fake_telegram.inject_message("too big", photo_file_id="big")
    fake_telegram.inject_message("gone", photo_file_id="missing")
    big, gone = await inbox.wait_for(2)
    assert (big.text, big.attachments, gone.text, gone.attachments) == ("too big", (), "gone", ())
    assert "getFile" in fake_telegram.calls  # tried for the missing one, skipped for the big one
    assert fake_telegram.calls.count("getFile") == 1


async def test_channel_posts_and_anonymous_admins(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    inbox = Inbox()
    await start_telegram(inbox, check_chat_admins=True)
    channel = {"id": -100999, "type": "channel", "title": "News"}
    fake_telegram.inject_update({"channel_post": {"message_id": 1, "date": 1, "chat": channel,
                                                  "sender_chat": channel, "text": "/status"}})
    anonymous = fake_telegram.make_message("/compress now", user_id=1087968824, user_name="GroupAnonymousBot",
                                           is_bot=True)
    anonymous["sender_chat"] = anonymous["chat"]
    fake_telegram.inject_update({"message": anonymous})
    post, admin = await inbox.wait_for(2)
    assert (post.chat_type, post.user_id, post.user_name, post.command) == ("channel", "-100999", "News", "status")
    assert (admin.user_id, admin.user_name, admin.is_admin_hint, admin.command) == (
        "-100123", "Test chat", True, "compress")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_webhook_mode_with_secret_token(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    port = _free_port()
    inbox = Inbox()
    await start_telegram(inbox, mode="webhook", webhook_port=port, webhook_path="tg",
                         webhook_url=f"http://127.0.0.1:{port}/tg", webhook_secret="s3cret")
    assert fake_telegram.webhooks[-1]["secret_token"] == "s3cret"
    assert fake_telegram.webhooks[-1]["url"] == f"http://127.0.0.1:{port}/tg"
    update = {"update_id": 77, "message": fake_telegram.make_message("@testbot via webhook")}
    async with httpx.AsyncClient() as client:
        wrong = await client.post(f"http://127.0.0.1:{port}/tg", json=update,
                                  headers={"X-Telegram-Bot-Api-Secret-Token": "nope"})
        right = await client.post(f"http://127.0.0.1:{port}/tg", json=update,
                                  headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"})
    assert (wrong.status_code, right.status_code) == (403, 200)
    [inbound] = await inbox.wait_for(1)
    assert inbound.text == "via webhook" and inbound.mentions_bot


def test_webhook_mode_requires_a_secret() -> None:
    with pytest.raises(ValueError, match="webhook_secret"):
        TelegramSettings(token="t", mode="webhook", webhook_url="https://example.invalid/tg")


def test_token_is_not_in_settings_repr() -> None:
    assert "SECRET" not in repr(TelegramSettings(token="1:SECRET", webhook_secret="SECRET"))


async def test_a_rejected_token_never_reaches_the_error(telegram_settings: TelegramSettings) -> None:
    # python-telegram-bot puts the whole token into its InvalidToken message; `concord run` would print it.
    secret = "123456:AAE-secret-part-of-the-token"
    adapter = TelegramAdapter(replace(telegram_settings, token=secret))
    with pytest.raises(ConnectionError) as info:
        await adapter.start(Inbox())
    shown = "".join(traceback.format_exception(info.value))
    assert "rejected the bot token" in shown
    assert "secret-part" not in shown and info.value.__context__ is None and info.value.__cause__ is None


async def test_anonymous_admins_count_only_with_chat_admin_checks(fake_telegram: FakeTelegram,
                                                                  start_telegram: StartFn) -> None:
    # Without check_chat_admins only gateway.admins grant admin rights; an anonymous group admin is still a
    # chat administrator, so the chat-admin setting decides for them too.
    for check in (False, True):
        inbox = Inbox()
        adapter = await start_telegram(inbox, check_chat_admins=check)
        anonymous = fake_telegram.make_message("/compress", user_id=1087968824, user_name="GroupAnonymousBot",
                                               is_bot=True)
        anonymous["sender_chat"] = anonymous["chat"]
        fake_telegram.inject_update({"message": anonymous})
        [inbound] = await inbox.wait_for(1)
        assert inbound.is_admin_hint is check
        await adapter.stop()


async def test_request_logs_never_show_the_token(fake_telegram: FakeTelegram, start_telegram: StartFn,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # Every Bot API and file URL carries the token; httpx logs each request line at INFO (seen with DEBUG on).
    caplog.set_level(logging.DEBUG)
    fake_telegram.files["photo1"] = b"\xff\xd8jpeg"
    inbox = Inbox()
    adapter = await start_telegram(inbox)
    fake_telegram.inject_message("@testbot look", photo_file_id="photo1")
    [inbound] = await inbox.wait_for(1)
    await adapter.send(inbound, "seen")
    assert "HTTP Request" in caplog.text and "/file/bot" in caplog.text
    assert fake_telegram.token not in caplog.text


# -- formatted replies (the fake parses HTML like Telegram) -----------------------------------------
GROUP = ChatRef("telegram", "-100123")


async def test_markdown_reply_arrives_as_html(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox())
    await adapter.send(GROUP, "**Done**: use `a < b` & see [docs](https://example.com/x_(y)).\n- one_two")
    [sent] = fake_telegram.sent_messages
    assert sent.parse_mode == "HTML"
    assert sent.text == ('<b>Done</b>: use <code>a &lt; b</code> &amp; see '
                         '<a href="https://example.com/x_(y)">docs</a>.\n• one_two')
    assert sent.visible_text == "Done: use a < b & see docs.\n• one_two"


async def test_markup_longer_than_the_limit_is_split_again(fake_telegram: FakeTelegram,
                                                           start_telegram: StartFn) -> None:
    # Escaping makes this HTML about 1.6 times its Markdown: chunks that fit as Markdown are too long as HTML.
    code = "\n".join(f'<div class="row">&nbsp;{i} & {i}</div>' for i in range(260))
    prose = "a < b & c > d; " * 300
    answer = f"## Layout\n\nThe **grid** below <renders> rows:\n\n```html\n{code}\n```\n\n{prose}"
    adapter = await start_telegram(Inbox())
    await adapter.deliver(Outbound(GROUP, answer, reply_to_message_id="7", continuation_prefix="@alice "))

    sent = fake_telegram.sent_messages
    assert len(sent) > len(split_message(answer, 4096, utf16_len, "@alice "))
    assert all(m.parse_mode == "HTML" and utf16_len(m.text) <= 4096 for m in sent)
    assert all(m.text.count("<pre>") == m.text.count("</pre>") for m in sent)
    assert [m.reply_to_message_id for m in sent] == [7] + [None] * (len(sent) - 1)
    assert all(m.text.startswith("@alice ") for m in sent[1:])
    shown = "".join(m.visible_text.removeprefix("@alice ") for m in sent)
    assert _content(shown) == _content(answer.replace("## ", "").replace("**", ""))


async def test_refused_markup_is_sent_again_as_plain_text(
    fake_telegram: FakeTelegram, start_telegram: StartFn, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await start_telegram(Inbox())
    answer = "\n\n".join(f"**Point {i}**: the cache keeps `warm` entries." for i in range(200))
    fake_telegram.fail_next("sendMessage", parse_error=True)
    await adapter.deliver(Outbound(GROUP, answer, reply_to_message_id="5"))

    first, *rest = fake_telegram.sent_messages
    assert rest and first.parse_mode is None and first.text.startswith("**Point 0**: the cache keeps `warm`")
    assert first.reply_to_message_id == 5 and all(m.reply_to_message_id is None for m in rest)
    assert all(m.parse_mode == "HTML" and m.text.startswith("<b>Point") for m in rest)
    assert fake_telegram.calls.count("sendMessage") == len(fake_telegram.sent_messages) + 1
    assert "sending it as plain text" in caplog.text


async def test_markup_with_nothing_to_show_is_sent_as_plain_text(fake_telegram: FakeTelegram,
                                                                 start_telegram: StartFn) -> None:
    # An empty code block is markup only: Telegram would answer "message text is empty".
    adapter = await start_telegram(Inbox())
    await adapter.send(GROUP, "```\n```")
    [sent] = fake_telegram.sent_messages
    assert (sent.parse_mode, sent.text) == (None, "```\n```")


async def test_plain_mode_sends_the_markdown_untouched(fake_telegram: FakeTelegram, start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox(), parse_mode="plain")
    await adapter.send(GROUP, "**bold** <b>not a tag</b> & `code`")
    [sent] = fake_telegram.sent_messages
    assert (sent.parse_mode, sent.text) == (None, "**bold** <b>not a tag</b> & `code`")


async def test_other_refusals_are_not_retried_as_plain_text(fake_telegram: FakeTelegram,
                                                           start_telegram: StartFn) -> None:
    adapter = await start_telegram(Inbox())
    fake_telegram.blocked_chats.add("-100123")
    with pytest.raises(SendError, match="blocked"):
        await adapter.send(GROUP, "**hello**")
    assert fake_telegram.calls.count("sendMessage") == 1
