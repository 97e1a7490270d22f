"""Two real ``concord run`` processes behind a "load balancer" share one Redis: Telegram webhook updates from one
user are spread over both workers, and the per-user limit holds across them (5 answers a minute, not 10)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from pathlib import Path

import httpx

from tests.conftest import REPO_ROOT
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_fixture import fake_telegram  # noqa: F401
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.conftest import until

RUN = "import asyncio, sys; from gateway.app import run_gateway; from gateway.config import load_settings; " \
      "sys.exit(asyncio.run(run_gateway(load_settings())))"
SECRET = "lb-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp_path: Path, llm: FakeLLMServer, telegram: FakeTelegram, redis_url: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT), CONCORD_STORAGE__DATA_DIR=str(tmp_path / "data"),
        CONCORD_MEMORY__DIRECTORY=str(tmp_path / "memory"), CONCORD_GATEWAY__SWEEP_CRON="off",
        CONCORD_LLM__BASE_URL=llm.openai_base_url, CONCORD_LLM__MODEL="fake-model",
        CONCORD_LLM__CONTEXT_LENGTH="8000", CONCORD_REDIS__URL=redis_url,
        CONCORD_LIMITS__USER_MESSAGES_PER_MINUTE="5",
        CONCORD_TELEGRAM__TOKEN=telegram.token, CONCORD_TELEGRAM__API_BASE_URL=telegram.api_root,
        CONCORD_TELEGRAM__MODE="webhook", CONCORD_TELEGRAM__WEBHOOK_PORT=str(port),
        CONCORD_TELEGRAM__WEBHOOK_URL=f"http://127.0.0.1:{port}/telegram", CONCORD_TELEGRAM__WEBHOOK_SECRET=SECRET,
        CONCORD_TELEGRAM__STREAMING="false")
    return env


async def test_two_workers_enforce_one_user_limit(fake_telegram: FakeTelegram, fake_llm: FakeLLMServer,  # noqa: F811
                                                 redis_url: str, tmp_path: Path) -> None:
    fake_llm.responder = lambda body: "answer"
    ports = [_free_port(), _free_port()]
    workers = [await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUN, cwd=tmp_path, env=_env(tmp_path, fake_llm, fake_telegram, redis_url, port),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for port in ports]
    try:
        await until(lambda: len(fake_telegram.webhooks) == 2, within_s=60)
        user = 10_000 + uuid.uuid4().int % 1_000_000  # a fresh user: buckets of earlier runs do not apply
        async with httpx.AsyncClient(timeout=30) as client:
            async def post(i: int) -> int:
                message = fake_telegram.make_message(f"@testbot question {i}", chat_id=-(100 + i), user_id=user)
                response = await client.post(f"http://127.0.0.1:{ports[i % 2]}/telegram",
                                             json={"update_id": 1000 + i, "message": message},
                                             headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
                return response.status_code

            assert await asyncio.gather(*(post(i) for i in range(20))) == [200] * 20
        await until(lambda: len(fake_telegram.sent_messages) == 20, within_s=60)
        texts = [m.text for m in fake_telegram.sent_messages]
        assert texts.count("answer") == 5
        assert sum(t.startswith("⏳ You can send 5 messages a minute") for t in texts) == 15
        assert len(fake_llm.requests) == 5
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            _, err = await asyncio.wait_for(worker.communicate(), 60)
            assert worker.returncode == 0, err.decode()[-2000:]
