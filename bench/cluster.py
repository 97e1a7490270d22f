"""Several real ``concord run`` workers on one PostgreSQL + Redis (or one worker on SQLite), behind a fake
Telegram.

Used by `bench.scale` and the multi-process tests. Each worker is its own process in Telegram webhook mode on
its own port, with ``/readyz`` on a metrics port; the fake Bot API and the fake LLM run in the calling
process. Without a fake Telegram the workers take their platform from ``env`` and ``worker_env`` (the
Discord shard tests: one shard range per worker). `Cluster.deliver` plays Telegram plus a load balancer: it posts an update to the worker it is
given and, when that worker refuses (503) or is gone (connection refused or reset, as after a SIGKILL),
to the next one, until one confirms it — which it does only once the update has been handled.

`check_exactly_once` compares what the chats were sent with what the bot answered and what the store holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.store import Store

__all__ = ["Cluster", "Sent", "check_exactly_once"]

REPO = Path(__file__).resolve().parent.parent
SECRET = "cluster-webhook-secret"
WEBHOOK_PATH = "telegram"
READY_TIMEOUT_S = 90.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Worker:
    """One ``concord run`` process and its ports."""

    index: int
    webhook_port: int
    metrics_port: int
    log_path: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass
class Sent:
    """One user message posted to the cluster: its chat, platform message id, the text its session stores, and
    that session's chat key (`gateway.intake.keys`; a private chat's unless given)."""

    chat_id: int
    message_id: int
    text: str
    chat_key: str = ""

    def __post_init__(self) -> None:
        self.chat_key = self.chat_key or f"dm:{self.chat_id}"


@dataclass
class Cluster:
    """``size`` workers; ``start`` / ``aclose``; ``env`` adds or overrides worker settings, ``worker_env[i]``
    those of worker ``i`` alone."""

    size: int
    database_url: str
    redis_url: str | None  # None: one worker on its own (SQLite), everything in-process
    telegram: Any  # tests.fakes.telegram_server.FakeTelegram, or None: the platform comes from env
    llm_base_url: str
    workdir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    worker_env: Sequence[Mapping[str, str]] = ()
    # The checkout the workers run (another revision's, for a before/after comparison).
    repo: Path = REPO
    workers: list[Worker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=2.0))
        self._update_ids = iter(range(1, 10**9))
        # Keys of this cluster only: handled ids and tickets of earlier runs on this Redis do not apply.
        self.key_prefix = f"concord-cluster:{uuid.uuid4().hex}:"
        self._chat_ids = iter(range(700_000, 10**12))

    def new_chat(self) -> int:
        """A private chat id not used before in this cluster."""
        return next(self._chat_ids)

    def _telegram_env(self, worker: Worker) -> dict[str, str]:
        if self.telegram is None:
            return {}
        url = f"http://127.0.0.1:{worker.webhook_port}/{WEBHOOK_PATH}"
        return {
            "CONCORD_TELEGRAM__TOKEN": self.telegram.token, "CONCORD_TELEGRAM__API_BASE_URL": self.telegram.api_root,
            "CONCORD_TELEGRAM__MODE": "webhook", "CONCORD_TELEGRAM__WEBHOOK_URL": url,
            "CONCORD_TELEGRAM__WEBHOOK_LISTEN": "127.0.0.1", "CONCORD_TELEGRAM__WEBHOOK_PORT": str(worker.webhook_port),
            "CONCORD_TELEGRAM__WEBHOOK_SECRET": SECRET, "CONCORD_TELEGRAM__PARSE_MODE": "plain",
            # One sendMessage per answer (no live edits): what the crash tests stall and count.
            "CONCORD_TELEGRAM__STREAMING": "false",
        }

    def _worker_env(self, worker: Worker) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
        return {
            **base,
            "PYTHONPATH": str(self.repo),
            "CONCORD_LLM__BASE_URL": self.llm_base_url, "CONCORD_LLM__MODEL": "fake-model",
            "CONCORD_LLM__CONTEXT_LENGTH": "200000",
            **self._telegram_env(worker),
            "CONCORD_STORAGE__DATABASE_URL": self.database_url,
            "CONCORD_STORAGE__DATA_DIR": str(self.workdir / f"worker-{worker.index}"),
            **({"CONCORD_REDIS__URL": self.redis_url, "CONCORD_REDIS__KEY_PREFIX": self.key_prefix}
               if self.redis_url else {}),
            "CONCORD_GATEWAY__SWEEP_CRON": "off", "CONCORD_GATEWAY__WORKER_ID": f"worker-{worker.index}",
            "CONCORD_MEMORY__ENABLED": "false",
            "CONCORD_METRICS__PORT": str(worker.metrics_port),
            "CONCORD_LOGGING__LEVEL": "INFO",
            **self.env,
            **(self.worker_env[worker.index] if worker.index < len(self.worker_env) else {}),
        }

    async def start(self, count: int | None = None) -> None:
        """Start every worker — or the first ``count``, the others left to `spawn` — and wait until each answers
        ``/readyz``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for index in range(self.size):
            self.workers.append(Worker(index, free_port(), free_port(), self.workdir / f"worker-{index}.log"))
        await asyncio.gather(*(self.spawn(w) for w in self.workers[:count]))

    async def spawn(self, worker: Worker) -> None:
        """(Re)start ``worker``'s process and wait until it is ready."""
        log = worker.log_path.open("ab")
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli.main", "run", cwd=str(self.workdir), env=self._worker_env(worker),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if worker.process.returncode is not None:
                raise RuntimeError(f"worker {worker.index} exited with {worker.process.returncode}; see "
                                   f"{worker.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                ready = await self._client.get(f"http://127.0.0.1:{worker.metrics_port}/readyz", timeout=1.0)
                if ready.status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {worker.index} not ready after {READY_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.1)

    def kill(self, index: int) -> None:
        """SIGKILL a worker: no cleanup, its locks and claims stay until they expire."""
        process = self.workers[index].process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGKILL)

    async def stop(self, index: int, timeout_s: float = 60.0) -> int | None:
        """SIGTERM a worker and wait for its graceful exit; its exit status."""
        process = self.workers[index].process
        if process is None:
            return None
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                process.send_signal(signal.SIGKILL)
                await process.wait()
        return process.returncode

    async def aclose(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after a grace period) and the HTTP client."""
        await asyncio.gather(*(self.stop(w.index, 30.0) for w in self.workers))
        await self._client.aclose()

    def message(self, chat_id: int, text: str) -> tuple[dict[str, Any], Sent]:
        """A private-chat update as Telegram sends it, and what was sent."""
        message = self.telegram.make_message(text, chat_type="private", chat_id=chat_id, user_id=chat_id)
        return {"update_id": next(self._update_ids), "message": message}, Sent(chat_id, message["message_id"], text)

    async def deliver(self, update: Mapping[str, Any], prefer: int) -> int:
        """Post ``update`` to worker ``prefer``, moving on to the next worker while refused or unreachable;
        the index of the worker that confirmed it."""
        attempt = 0
        while True:
            worker = self.workers[(prefer + attempt) % self.size]
            attempt += 1
            try:
                answer = await self._client.post(
                    f"http://127.0.0.1:{worker.webhook_port}/{WEBHOOK_PATH}", json=update,
                    headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                return worker.index
            if attempt % self.size == 0:
                await asyncio.sleep(0.2)  # every worker refused: wait a little, as Telegram does

    async def metric(self, index: int, name: str) -> float:
        """Sum of the samples of metric ``name`` (every label) that worker ``index`` exports now."""
        body = (await self._client.get(f"http://127.0.0.1:{self.workers[index].metrics_port}/metrics")).text
        total = 0.0
        for line in body.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


def telegram_reply(reply: Any) -> tuple[int, int | None]:
    """(chat id, id of the message answered) of a message the fake Telegram received."""
    return int(reply.chat_id), reply.reply_to_message_id


async def check_exactly_once(sent: Sequence[Sent], replies: Sequence[Any], database_url: str, *,
                             platform: str = "telegram",
                             reply_of: Callable[[Any], tuple[int, int | None]] = telegram_reply) -> list[str]:
    """Problems found (empty: none lost, none answered twice, every session in order), from the replies the
    fake platform received (``reply_of`` reads each one's chat and the message it answers) and the user
    messages the store holds."""
    problems: list[str] = []
    answered: dict[int | None, int] = {}
    reply_order: dict[int, list[int | None]] = {}
    for reply in replies:
        chat_id, answers = reply_of(reply)
        answered[answers] = answered.get(answers, 0) + 1
        reply_order.setdefault(chat_id, []).append(answers)
    by_chat: dict[int, list[Sent]] = {}
    for item in sent:
        by_chat.setdefault(item.chat_id, []).append(item)
        count = answered.get(item.message_id, 0)
        if count != 1:
            problems.append(f"message {item.message_id} in chat {item.chat_id} answered {count} times")
    async with await Store.open(database_url, migrate=False) as store:
        for chat_id, items in by_chat.items():
            expected = [i.message_id for i in items]
            if [m for m in reply_order.get(chat_id, []) if m in set(expected)] != expected:
                problems.append(f"chat {chat_id}: answers out of order")
            record = await store.sessions.get_active(platform, items[0].chat_key)
            if record is None:
                problems.append(f"chat {chat_id}: no session stored")
                continue
            active = await store.messages.load_active(record.id)
            stored = [m["content"] for m in active.messages if m["role"] == "user"]
            if stored != [i.text for i in items]:
                problems.append(f"chat {chat_id}: stored user messages {len(stored)} differ from the "
                                f"{len(items)} sent (lost, doubled or reordered)")
    return problems
