"""The same chain on PostgreSQL + Redis locks (the multi-worker deployment), and `run_sweep` from settings."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.scratch_db import scratch_postgres
from gateway.app import Gateway
from gateway.app.maintenance import SweepSlotTaken, run_sweep
from gateway.app.runtime_parts import build_runtime
from gateway.intake.locks import RedisLocks
from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import ScriptedAdapter, answer_by_kind, bulk_session, chatter, make_settings


@pytest.fixture
async def private_postgres(postgres_url: str) -> AsyncIterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    async with scratch_postgres(postgres_url, "concord_gw") as url:
        yield url


async def test_postgres_and_redis_serve_queue_and_compress(private_postgres: str, redis_url: str,
                                                           fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    # Thirty messages queue behind one another at once: room for all of them (limits.session_queue_depth).
    settings = make_settings(fake_llm, tmp_path, llm={"context_length": 8_000},
                             storage={"database_url": private_postgres}, limits={"session_queue_depth": 30})
    locks = RedisLocks.from_url(redis_url, prefix=f"concord:test:{uuid.uuid4().hex[:8]}:")
    adapter = ScriptedAdapter()
    gateway = Gateway(await build_runtime(settings, locks=locks), [adapter])
    await gateway.start()
    try:
        fake_llm.responder = lambda body: Reply(f"re: {body['messages'][-1]['content'][:12]}", delay=0.02)
        questions = [f"question {i:02d} " + "detail " * 60 for i in range(30)]
        await asyncio.gather(*(adapter.say(q) for q in questions))
        assert adapter.texts() == [f"re: question {i:02d}" for i in range(30)]
        kinds = answer_by_kind(fake_llm)
        await adapter.say("/compress", admin_hint=True)
        assert adapter.texts()[-1].startswith("Compressed: 60 → ") and kinds == ["summary"]
        record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
        assert record.compactions == 1
    finally:
        await gateway.aclose(grace_seconds=5)


async def test_run_sweep_from_settings(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    settings = make_settings(fake_llm, tmp_path, llm={"context_length": 8_000},
                             gateway={"hygiene_hard_message_limit": 30})
    store = await Store.open(settings.storage.url)
    adapter_less = Gateway(await build_runtime(settings, store=store), [])
    over = await bulk_session(adapter_less, "dm:x", chatter(31, words=100))
    await bulk_session(adapter_less, "dm:y", chatter(5))
    await store.aclose()
    kinds = answer_by_kind(fake_llm)
    dry = await run_sweep(settings, dry_run=True, show_progress=False)
    assert [(e.session_id, e.outcome) for e in dry.entries] == [(over, "skipped: dry run")] and kinds == []
    report = await run_sweep(settings, dry_run=False)
    assert [(e.session_id, e.outcome) for e in report.entries] == [(over, "compressed")]
    assert kinds == ["summary"]


async def test_run_sweep_needs_an_llm_unless_dry(tmp_path: Path) -> None:
    from gateway.config import load_settings

    settings = load_settings(storage={"data_dir": str(tmp_path)})
    with pytest.raises(RuntimeError, match="--dry-run"):
        await run_sweep(settings, dry_run=False)
    report = await run_sweep(settings, dry_run=True, show_progress=False)
    assert report.entries == []


async def test_a_cron_sweep_skips_the_run_a_worker_already_swept(fake_llm: FakeLLMServer, tmp_path: Path,
                                                                  redis_url: str) -> None:
    prefix = f"concord:test:{uuid.uuid4().hex[:8]}:"
    settings = make_settings(fake_llm, tmp_path, redis={"url": redis_url, "key_prefix": prefix},
                             gateway={"sweep_cron": "0 * * * *"})
    first = await run_sweep(settings, show_progress=False)  # a timer's sweep claims this hour's run
    assert first.entries == []
    with pytest.raises(SweepSlotTaken, match=r"T\d\d:00:00\+00:00 \(gateway.sweep_cron\) already ran"):
        await run_sweep(settings, show_progress=False)  # a worker's scheduler, or a second timer, finds it taken
    assert (await run_sweep(settings, show_progress=False, force=True)).entries == []
    assert (await run_sweep(settings, dry_run=True, show_progress=False)).dry_run  # a dry run claims nothing
    unscheduled = make_settings(fake_llm, tmp_path, redis={"url": redis_url, "key_prefix": prefix},
                                gateway={"sweep_cron": "off"})
    await run_sweep(unscheduled, show_progress=False)  # the timer is the schedule: nothing to share
