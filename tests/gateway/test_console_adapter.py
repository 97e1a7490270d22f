"""The console adapter on its own: lines in, Inbound out, replies printed, end of input closes it."""

from __future__ import annotations

import asyncio
import io

from adapters.base import Inbound
from adapters.console import ConsoleAdapter


async def _run(text: str, **kw: object) -> tuple[list[Inbound], str]:
    out = io.StringIO()
    adapter = ConsoleAdapter(stdin=io.StringIO(text), stdout=out, **kw)  # type: ignore[arg-type]
    seen: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        seen.append(inbound)
        await asyncio.sleep(0.01)  # answered after a delay: close must still wait for it
        await adapter.send(inbound, f"echo {inbound.text}")

    await adapter.start(handler)
    await asyncio.wait_for(adapter.wait_closed(), 5)
    await adapter.stop()
    return seen, out.getvalue()


async def test_lines_become_dm_inbounds_and_every_one_is_answered_before_close() -> None:
    seen, out = await _run("hello\n\n/compress the db  \nbye\n", user_name="ann", admin=False)
    assert [m.text for m in seen] == ["hello", "/compress the db", "bye"]
    assert all(m.chat_type == "dm" and m.platform == "console" and m.user_id == "ann" for m in seen)
    assert [m.message_id for m in seen] == ["1", "2", "3"]
    assert seen[1].is_command and seen[1].command == "compress" and seen[1].command_args == "the db"
    assert not seen[0].is_command and not seen[0].is_admin_hint
    assert sorted(out.splitlines()) == ["echo /compress the db", "echo bye", "echo hello"]


async def test_quit_stops_reading() -> None:
    seen, out = await _run("one\n/quit\ntwo\n")
    assert [m.text for m in seen] == ["one"]
    assert seen[0].is_admin_hint  # the local operator owns the process
    assert out == "echo one\n"


async def test_no_input_closes_at_once() -> None:
    seen, out = await _run("")
    assert seen == [] and out == ""
