"""Fixtures for the multi-process tests: a private PostgreSQL database, the fakes, and a worker cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import Cluster
from bench.scratch_db import scratch_postgres
from gateway.store import upgrade_database
from tests.fakes.discord_fixture import fake_discord  # noqa: F401
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.llm_fixture import fake_llm  # noqa: F401
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_fixture import fake_telegram  # noqa: F401
from tests.fakes.telegram_server import FakeTelegram

ClusterFactory = Callable[..., Awaitable[Cluster]]


@pytest.fixture
async def database_url(postgres_url: str) -> AsyncIterator[str]:
    """A migrated PostgreSQL database of this test's own (dropped after)."""
    async with scratch_postgres(postgres_url, prefix="concord_cluster") as url:
        await upgrade_database(url)
        yield url


@pytest.fixture
async def cluster_factory(database_url: str, redis_url: str, fake_telegram: FakeTelegram,  # noqa: F811
                          fake_llm: FakeLLMServer, tmp_path: Path) -> AsyncIterator[ClusterFactory]:  # noqa: F811
    """Start ``size`` real ``concord run`` workers on the private database and Redis: Telegram webhook mode, or
    the bot of ``discord`` (a started fake) with ``worker_env[i]`` for worker ``i`` (its shards)."""
    started: list[Cluster] = []

    async def make(size: int, *, discord: FakeDiscord | None = None, worker_env: Sequence[Mapping[str, str]] = (),
                   **env: Any) -> Cluster:
        settings = {**(discord.process_env() if discord else {}), **{k: str(v) for k, v in env.items()}}
        cluster = Cluster(size, database_url, redis_url, None if discord else fake_telegram,
                          fake_llm.openai_base_url, tmp_path / f"cluster-{len(started)}", env=settings,
                          worker_env=worker_env)
        started.append(cluster)
        await cluster.start()
        return cluster

    yield make
    for cluster in started:
        await cluster.aclose()
