"""`concord run` on a real terminal (a pty): the chat stays clean of INFO logs, which go to the log file, and
Ctrl-C cuts the answer off at once; a second Ctrl-C quits."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.fakes.llm_server import FakeLLMServer, Reply

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][AB0-2]|\x1b[=>]|\r")


class Pty:
    """The terminal side of a pty: everything the program printed so far, keys typed into it."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.raw = b""
        asyncio.get_running_loop().add_reader(master, self._read)

    def _read(self) -> None:
        try:
            self.raw += os.read(self.master, 65536)
        except OSError:
            asyncio.get_running_loop().remove_reader(self.master)

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace"))

    async def wait_for(self, text: str, within: float = 30) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while text not in self.screen:
            assert loop.time() < deadline, f"{text!r} never appeared in:\n{self.screen[-3000:]}"
            await asyncio.sleep(0.02)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


async def test_console_on_a_terminal(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    asked = asyncio.Event()

    def respond(body: dict) -> Reply:
        asked.set()
        return Reply("never shown", delay=30)

    fake_llm.reply("hello there, human")
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env.update(PYTHONPATH=str(REPO_ROOT), TERM="xterm", NO_COLOR="1", PROMPT_TOOLKIT_NO_CPR="1",
               CONCORD_STORAGE__DATA_DIR=str(tmp_path / "data"), CONCORD_GATEWAY__SWEEP_CRON="off",
               CONCORD_LLM__BASE_URL=fake_llm.openai_base_url, CONCORD_LLM__MODEL="fake-model",
               CONCORD_LLM__CONTEXT_LENGTH="200000", CONCORD_LOGGING__LEVEL="INFO")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli.main", "run", cwd=tmp_path, env=env, stdin=slave, stdout=slave,
        stderr=slave, start_new_session=True)
    os.close(slave)
    term = Pty(master)
    try:
        await term.wait_for("Chatting with Concord")
        term.type("hi\r")
        await term.wait_for("hello there, human")
        fake_llm.responder = respond
        term.type("tell me a long story\r")
        await asyncio.wait_for(asked.wait(), 30)
        loop = asyncio.get_running_loop()
        started = loop.time()
        term.type("\x03")
        await term.wait_for("Stopped.", within=10)
        assert loop.time() - started < 10  # the model would have taken 30 s
        term.type("\x03")
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        term.close()
    screen = term.screen
    assert " INFO " not in screen and "Traceback" not in screen, screen[-3000:]
    log = (tmp_path / "data" / "concord.log").read_text()
    assert "INFO gateway.app: adapter console started" in log
