"""The shared adapter pieces: command parsing, Outbound targets, keep_alive, handler isolation, drain."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from adapters.base import Adapter, ChatRef, Inbound, Outbound, keep_alive, parse_command


def _inbound(**overrides: object) -> Inbound:
    fields: dict[str, object] = dict(platform="console", chat_id="c", chat_type="group", thread_id="t",
                                     user_id="u", user_name="U", message_id="m1", text="hi")
    fields.update(overrides)
    return Inbound(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "bot", "expected"),
    [
        ("/compress@testbot focus text", "testbot", ("compress", "focus text")),
        ("/compress@TestBot", "testbot", ("compress", "")),
        ("/new@otherbot", "testbot", None),
        ("/new@otherbot", None, None),
        ("/Status  \n more lines", None, ("status", "more lines")),
        ("not /a command", None, None),
        ("/", None, None),
        ("/ spaced", None, None),
        ("/path/to/file is here", None, None),
    ],
)
def test_parse_command(text: str, bot: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_command(text, bot) == expected


def test_outbound_to_inbound_replies_in_its_thread() -> None:
    out = Outbound.to(_inbound(), "answer")
    assert out == Outbound(ChatRef("console", "c", "t"), "answer", reply_to_message_id="m1")
    assert Outbound.to(ChatRef("console", "c"), "note").reply_to_message_id is None


def test_addressed_rules() -> None:
    assert not _inbound().addressed
    assert _inbound(chat_type="dm").addressed
    assert _inbound(mentions_bot=True).addressed
    assert _inbound(reply_to_bot=True).addressed
    assert _inbound(is_command=True, command="new").addressed


async def test_keep_alive_repeats_and_survives_failures(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("network down")

    async with keep_alive(flaky, 0.05, "test typing"):
        await asyncio.sleep(0.18)
    seen = len(calls)
    assert seen >= 3
    await asyncio.sleep(0.1)
    assert len(calls) == seen
    assert "test typing failed: OSError" in caplog.text


class _Recording(Adapter):
    """A minimal in-memory adapter: records chunks, so base-class behaviour is tested without a platform."""

    name = "recording"
    limit = 20

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[ChatRef, str, str | None]] = []

    async def start(self, on_message) -> None:  # type: ignore[no-untyped-def]
        self._handler = on_message

    async def stop(self) -> None:
        await self._drain(0.1)

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        self.sent.append((chat, text, reply_to))


async def test_deliver_puts_reply_reference_and_prefix_right() -> None:
    adapter = _Recording()
    await adapter.deliver(Outbound(ChatRef("console", "c"), "alpha beta gamma delta epsilon", "m9", "@al "))
    assert [(text, reply) for _, text, reply in adapter.sent] == [
        ("alpha beta gamma", "m9"), ("@al delta epsilon", None)]


async def test_handler_errors_are_logged_and_slow_handlers_cancelled_on_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = _Recording()
    finished: list[str] = []

    async def handler(inbound: Inbound) -> None:
        if inbound.text == "boom":
            raise RuntimeError("bug")
        await asyncio.sleep(10)
        finished.append(inbound.text)

    await adapter.start(handler)
    adapter._dispatch(_inbound(text="boom"))
    adapter._dispatch(_inbound(text="slow", message_id="m2"))
    await asyncio.sleep(0.05)
    await adapter.stop()
    assert "message handler failed for message m1" in caplog.text
    assert finished == [] and not adapter._tasks
