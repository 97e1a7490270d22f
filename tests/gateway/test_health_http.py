"""``metrics.port``: Prometheus /metrics fed by the gateway's own metrics, /healthz, and /readyz that turns 503
when the database, Redis or an adapter is not there."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.engine import make_url

from bench.scratch_db import scratch_postgres
from gateway.app import Gateway
from gateway.config import ConfigError, load_settings
from gateway.store.database import create_engine
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory


def _url(gateway: Gateway, path: str) -> str:
    assert gateway.health is not None
    return f"http://127.0.0.1:{gateway.health.port}{path}"


async def test_metrics_count_what_the_gateway_did(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(metrics={"port": 0})
    fake_llm.responder = lambda body: Reply("hi there", usage={"prompt_tokens": 120, "completion_tokens": 7,
                                                                "cache_read_tokens": 100})
    await adapter.say("hello")
    async with httpx.AsyncClient() as client:
        body = (await client.get(_url(gateway, "/metrics"))).text
        health = await client.get(_url(gateway, "/healthz"))
        ready = await client.get(_url(gateway, "/readyz"))
    assert 'concord_messages_received_total{platform="discord"} 1.0' in body
    assert 'concord_messages_sent_total{platform="discord"} 1.0' in body
    assert 'concord_turn_seconds_count{outcome="ok"} 1.0' in body
    assert 'concord_llm_tokens_total{model="fake-model",purpose="agent",type="prompt"} 120.0' in body
    assert 'concord_llm_tokens_total{model="fake-model",purpose="agent",type="cache_read"} 100.0' in body
    assert 'concord_llm_request_seconds_count{model="fake-model",purpose="agent"} 1.0' in body
    assert 'concord_lock_wait_seconds_count 1.0' in body
    assert "concord_queue_depth 0.0" in body
    assert "hello" not in body and "hi there" not in body  # never message content
    assert health.status_code == 200
    assert ready.status_code == 200 and ready.text == "ready\n"


async def test_readiness_fails_without_redis_or_a_connected_adapter(gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory(metrics={"port": 0}, redis={"url": "redis://:hunter2@127.0.0.1:9/0"})
    await adapter.say("answered all the same")  # every Redis part fails open, and each failure is counted
    assert adapter.texts() == ["ok"]
    errors = gateway.rt.metrics.instruments.registry.get_sample_value
    for operation in ("acquire", "order_arrive", "claim_check", "claim_claim"):
        assert errors("concord_lock_backend_errors_total", {"operation": operation}) == 1, operation
    async with httpx.AsyncClient() as client:
        ready = await client.get(_url(gateway, "/readyz"))
        assert ready.status_code == 503
        assert ready.text == "not ready: redis\n" and "hunter2" not in ready.text
        await adapter.stop_receiving()
        ready = await client.get(_url(gateway, "/readyz"))
        assert ready.text == "not ready: adapter:discord, redis\n"
        assert (await client.get(_url(gateway, "/healthz"))).status_code == 200  # the process is still up


async def test_readiness_fails_when_the_database_is_gone(gateway_factory: GatewayFactory, postgres_url: str) -> None:
    async with scratch_postgres(postgres_url) as url:
        gateway, _ = await gateway_factory(metrics={"port": 0}, storage={"database_url": url})
        assert gateway.health is not None
        assert await gateway.health.readiness() == {"database": True, "adapter:discord": True}
        name = make_url(url).database
        admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.dispose()
        assert await gateway.health.readiness() == {"database": False, "adapter:discord": True}


def test_the_metrics_port_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        load_settings(metrics={"port": 70000})
