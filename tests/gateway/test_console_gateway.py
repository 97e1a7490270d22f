"""The console in front of a real gateway: Ctrl-C reaches the turn in the router, and the chat says so."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from adapters.console import ConsoleAdapter
from adapters.console_prompt import ConsolePrompt
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.conversation.answers import STOPPED_TEXT
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import make_settings


async def test_ctrl_c_cancels_the_turn_at_once_and_keeps_the_question(fake_llm: FakeLLMServer,
                                                                      tmp_path: Path) -> None:
    asked = asyncio.Event()

    def respond(body: dict) -> Reply:
        asked.set()
        return Reply("far too late", delay=30)

    fake_llm.responder = respond
    with create_pipe_input() as pipe:
        out = io.StringIO()
        console = ConsoleAdapter(prompt=ConsolePrompt("you", colour=False, pt_input=pipe, pt_output=DummyOutput()),
                                 stdout=out)
        gateway = Gateway(await build_runtime(make_settings(fake_llm, tmp_path)), [console])
        await gateway.start()
        try:
            pipe.send_text("what is the plan?\r")
            await asyncio.wait_for(asked.wait(), 10)
            loop = asyncio.get_running_loop()
            started = loop.time()
            pipe.send_text("\x03")
            while STOPPED_TEXT not in out.getvalue():
                assert loop.time() - started < 10, out.getvalue()  # the model would take 30 s
                await asyncio.sleep(0.02)
            pipe.send_text("and now?\r")  # the chat goes on
            fake_llm.responder = None
            fake_llm.reply("here is the plan")
            while "here is the plan" not in out.getvalue():
                assert loop.time() - started < 20, out.getvalue()
                await asyncio.sleep(0.02)
            record = await gateway.rt.store.sessions.get_active("console", "dm:console")
            assert record is not None
            kept = (await gateway.rt.store.messages.load_active(record.id)).messages
            assert (kept[0]["role"], kept[0]["content"]) == ("user", "what is the plan?")  # nothing lost
        finally:
            await gateway.aclose(grace_seconds=5)
