"""Gateway test harness: a runtime over the fake LLM server and a real SQLite store, and a scripted adapter."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Adapter, ChatRef, Inbound, InboundHandler
from agent.compression.summary import SUMMARIZER_SYSTEM
from bench.scratch_db import scratch_postgres
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.config import Settings, load_settings
from tests.fakes.llm_fixture import fake_llm  # noqa: F401
from tests.fakes.llm_server import FakeLLMServer

SUMMARY_MARKER = "SUMMARY-BODY-7f3a"


def is_summary_request(body: dict[str, Any]) -> bool:
    """Whether a request to the fake server is the compressor's summary call (by its system prompt: a chat
    request may quote the template too, e.g. a static fallback summary in the history)."""
    return SUMMARIZER_SYSTEM in str(body.get("messages"))


class ScriptedAdapter(Adapter):
    """An in-test platform: `say` injects an Inbound, everything sent is recorded."""

    name = "discord"
    limit = 2000

    def __init__(self, ids: Iterator[int] | None = None) -> None:
        super().__init__()
        self.sent: list[tuple[ChatRef, str, str | None]] = []
        self.typing_count = 0
        # A platform never reuses a message id: the adapters of one test (a gateway and its restart) share ids.
        self._ids = ids or itertools.count(1)

    async def start(self, on_message: InboundHandler) -> None:
        self._handler = on_message

    async def stop(self) -> None:
        await self._drain(grace_s=5)

    @contextlib.asynccontextmanager
    async def typing(self, chat: ChatRef | Inbound) -> AsyncIterator[None]:
        self.typing_count += 1
        yield

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        self.sent.append((chat, text, reply_to))

    def inbound(self, text: str, *, chat_type: str = "dm", chat_id: str = "c1", user_id: str = "u1",
                user_name: str = "Ann", thread_id: str | None = None, mentions_bot: bool = False,
                reply_to_bot: bool = False, admin_hint: bool = False) -> Inbound:
        command = None
        if text.startswith("/"):
            name, _, args = text[1:].partition(" ")
            command = (name, args)
        return Inbound(platform="discord", chat_id=chat_id, chat_type=chat_type,  # type: ignore[arg-type]
                       thread_id=thread_id, user_id=user_id, user_name=user_name, message_id=str(next(self._ids)),
                       text=text, mentions_bot=mentions_bot, reply_to_bot=reply_to_bot,
                       is_command=command is not None, command=command[0] if command else None,
                       command_args=command[1] if command else "", is_admin_hint=admin_hint)

    async def say(self, text: str, **kw: Any) -> None:
        """Deliver one message and wait until it has been handled."""
        assert self._handler is not None
        await self._handler(self.inbound(text, **kw))

    def post(self, text: str, **kw: Any) -> None:
        """Deliver one message as a platform does, its handling in a task of its own (an observed group line
        is done only once its batch is stored)."""
        self._dispatch(self.inbound(text, **kw))

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [t for chat, t, _ in self.sent if chat_id is None or chat.chat_id == chat_id]


@pytest.fixture(params=["sqlite", "postgres"])
async def backend_storage(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """The ``storage`` settings of one backend (a private PostgreSQL database, dropped afterwards)."""
    if request.param == "sqlite":
        yield {}
        return
    async with scratch_postgres(request.getfixturevalue("postgres_url"), "concord_erase") as url:
        yield {"database_url": url}


def make_settings(server: FakeLLMServer, tmp_path: Path, **sections: dict[str, Any]) -> Settings:
    base: dict[str, dict[str, Any]] = {
        "llm": {"base_url": server.openai_base_url, "model": "fake-model", "context_length": 200_000},
        "storage": {"data_dir": str(tmp_path)},
        "gateway": {"sweep_cron": None, "admins": ["discord:boss"]},
        "memory": {"directory": str(tmp_path / "memory")},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return load_settings(**base)


GatewayFactory = Callable[..., Awaitable[tuple[Gateway, ScriptedAdapter]]]


@pytest.fixture
async def gateway_factory(fake_llm: FakeLLMServer, tmp_path: Path) -> AsyncIterator[GatewayFactory]:  # noqa: F811
    """Build and start a gateway with one scripted adapter; everything is closed after the test."""
    built: list[Gateway] = []
    ids = itertools.count(1)

    async def make(clock: Callable[[], datetime] | None = None,
                   **sections: dict[str, Any]) -> tuple[Gateway, ScriptedAdapter]:
        settings = make_settings(fake_llm, tmp_path, **sections)
        adapter = ScriptedAdapter(ids)
        runtime = await build_runtime(settings, clock=clock) if clock else await build_runtime(settings)
        gateway = Gateway(runtime, [adapter])
        await gateway.start()
        built.append(gateway)
        return gateway, adapter

    yield make
    for gateway in built:
        await gateway.aclose(grace_seconds=5)
    await asyncio.sleep(0)


def answer_by_kind(server: FakeLLMServer, answer: str = "answer") -> list[str]:
    """Make the fake answer summary calls with the marker and chat calls with ``answer``; return a kind log."""
    kinds: list[str] = []

    def respond(body: dict[str, Any]) -> str:
        if is_summary_request(body):
            kinds.append("summary")
            return f"## Goal\n{SUMMARY_MARKER} the user chatted."
        kinds.append("chat")
        return answer

    server.responder = respond
    return kinds


async def bulk_session(gateway: Gateway, chat_key: str, messages: list[dict[str, Any]], *,
                       last_prompt_tokens: int = 0) -> str:
    """Load ``messages`` straight into the store as an open session; return its id."""
    store, counter = gateway.rt.store, gateway.rt.counter
    record = await store.sessions.get_or_create_active("discord", chat_key)
    await store.messages.append(record.id, messages, [counter.count_message(m) for m in messages])
    if last_prompt_tokens:
        from gateway.store import EngineState

        await store.sessions.save_engine_state(record.id, EngineState(last_prompt_tokens=last_prompt_tokens))
    return record.id


def chatter(count: int, words: int = 8) -> list[dict[str, Any]]:
    """``count`` alternating user/assistant messages of about ``words`` words each."""
    vocabulary = "alpha beta gamma delta kernel cache build deploy schema index query shard".split()
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"m{i} " + " ".join(vocabulary[(i + j) % len(vocabulary)] for j in range(words))}
            for i in range(count)]
