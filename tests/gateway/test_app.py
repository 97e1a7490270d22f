"""The composition root: `concord run` without an LLM, the console through a real subprocess, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from gateway.app import EXIT_NOT_CONFIGURED, run_gateway
from gateway.app.platforms import build_adapters
from gateway.config import load_settings
from gateway.conversation.answers import INTERRUPTED_TEXT
from gateway.store import Store
from tests.conftest import REPO_ROOT
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory

RUN = "import asyncio, sys; from gateway.app import run_gateway; from gateway.config import load_settings; " \
      "sys.exit(asyncio.run(run_gateway(load_settings())))"


def _env(tmp_path: Path, server: FakeLLMServer | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env.update(PYTHONPATH=str(REPO_ROOT), CONCORD_STORAGE__DATA_DIR=str(tmp_path / "data"),
               CONCORD_GATEWAY__SWEEP_CRON="off", CONCORD_MEMORY__DIRECTORY=str(tmp_path / "memory"))
    if server is not None:
        # The replies are scripted in order: a compaction ahead of need would take one for its summary.
        env.update(CONCORD_LLM__BASE_URL=server.openai_base_url, CONCORD_LLM__MODEL="fake-model",
                   CONCORD_LLM__CONTEXT_LENGTH="8000", CONCORD_COMPRESSION__AHEAD_OF_NEED="false")
    return env


async def _spawn(tmp_path: Path, server: FakeLLMServer | None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUN, cwd=tmp_path, env=_env(tmp_path, server), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def test_without_an_llm_run_explains_what_to_set(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(storage={"data_dir": str(tmp_path)})
    assert await run_gateway(settings) == EXIT_NOT_CONFIGURED
    err = capsys.readouterr().err
    for needed in ("CONCORD_LLM__BASE_URL", "CONCORD_LLM__MODEL", "CONCORD_LLM__API_KEY", "llama.cpp", "Ollama",
                   "vLLM", "http://127.0.0.1:8080/v1"):
        assert needed in err
    assert not (tmp_path / "concord.db").exists()  # it stopped before touching anything


def test_console_is_the_adapter_when_no_platform_token_is_set(tmp_path: Path) -> None:
    adapters = build_adapters(load_settings(storage={"data_dir": str(tmp_path)}))
    assert [a.name for a in adapters] == ["console"]


async def test_console_chat_through_a_subprocess_with_piped_stdin(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    for i in range(30):
        fake_llm.reply(f"answer {i} " + "words " * 60)
    proc = await _spawn(tmp_path, fake_llm)
    lines = [f"question {i} " + "context " * 60 for i in range(30)] + ["/compress", "/status", "/help"]
    out, err = await asyncio.wait_for(proc.communicate(("\n".join(lines) + "\n").encode()), 60)
    text = out.decode()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert [line.split(" ", 2)[:2] for line in text.splitlines() if line.startswith("answer ")] == [
        ["answer", str(i)] for i in range(30)]
    assert "Compressed: 60 → " in text  # the console user is the local admin
    assert "Compressions: 1" in text and "manual /compress" in text and "Engine: compressor" in text
    assert "/new — start a fresh session" in text
    assert (tmp_path / "data" / "concord.db").exists()


async def test_without_an_llm_the_subprocess_exits_non_zero_with_help(tmp_path: Path) -> None:
    proc = await _spawn(tmp_path, None)
    _, err = await asyncio.wait_for(proc.communicate(b"hello\n"), 60)
    assert proc.returncode == EXIT_NOT_CONFIGURED
    assert "CONCORD_LLM__BASE_URL" in err.decode() and "Traceback" not in err.decode()


async def test_sigterm_finishes_the_turn_in_flight(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("slow but complete", delay=1.0)
    proc = await _spawn(tmp_path, fake_llm)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"hello\n")
    await proc.stdin.drain()
    for _ in range(300):
        if fake_llm.requests:
            break
        await asyncio.sleep(0.05)
    assert fake_llm.requests, "the turn never reached the model"
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    assert "slow but complete" in out.decode()


async def test_aclose_waits_for_in_flight_turns(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    asked = asyncio.Event()

    def respond(body: dict) -> Reply:
        asked.set()
        return Reply("done", delay=0.3)

    fake_llm.responder = respond
    turn = asyncio.create_task(adapter.say("hello"))
    await asyncio.wait_for(asked.wait(), 10)
    await gateway.aclose(grace_seconds=10)
    await turn
    assert adapter.texts() == ["done"]


def test_every_platform_with_a_token_gets_an_adapter_and_no_console(tmp_path: Path) -> None:
    settings = load_settings(storage={"data_dir": str(tmp_path)}, discord={"token": "d-token"},
                             telegram={"token": "123:t-token"})
    assert [a.name for a in build_adapters(settings)] == ["discord", "telegram"]


@pytest.mark.parametrize("mode", ["html", "plain"])
def test_telegram_settings_reach_the_adapter(tmp_path: Path, mode: str) -> None:
    settings = load_settings(storage={"data_dir": str(tmp_path)}, gateway={"sweep_cron": None},
                             telegram={"token": "123:t-token", "parse_mode": mode, "check_chat_admins": True})
    [telegram] = build_adapters(settings)
    assert telegram.settings.parse_mode == mode  # type: ignore[attr-defined]
    assert telegram.settings.check_chat_admins  # type: ignore[attr-defined]


async def test_a_turn_cut_off_by_shutdown_says_so_and_is_kept(gateway_factory: GatewayFactory,
                                                               fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    asked = asyncio.Event()

    def respond(body: dict) -> Reply:
        asked.set()
        return Reply("too late", delay=5)

    fake_llm.responder = respond
    turn = asyncio.create_task(adapter.say("hello"))
    await asyncio.wait_for(asked.wait(), 10)
    await asyncio.wait_for(gateway.aclose(grace_seconds=0.1), 10)
    await asyncio.gather(turn, return_exceptions=True)
    assert adapter.texts() == [INTERRUPTED_TEXT]
    async with await Store.open(gateway.rt.settings.storage.url, migrate=False) as store:
        record = await store.sessions.get_active("discord", "dm:c1")
        assert record is not None
        kept = (await store.messages.load_active(record.id)).messages
    assert (kept[0]["role"], kept[0]["content"]) == ("user", "hello")  # the user's message is not lost
