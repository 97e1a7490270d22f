"""The Prometheus series behind `Metrics`: compressions, savings, static fallbacks and aborts by trigger,
summary failures by error kind, bounded model labels."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from agent.compression.engine import CompressionResult
from agent.events import EVENT_COMPRESS, AgentEvent
from agent.llm.base import Usage
from gateway.ops.metrics import EVENT_COMPRESS_ABORTED, MAX_MODEL_LABELS, Metrics


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.instruments.registry.get_sample_value(name, labels)


def _compressed(metrics: Metrics, trigger: str, kind: str = "llm", before: int = 1000, after: int = 250) -> None:
    result = CompressionResult([], True, 40, 10, before, after, summary_kind=kind)
    metrics.observe(AgentEvent(EVENT_COMPRESS, "s1", {"result": result,
                                                      "compaction": SimpleNamespace(trigger=trigger)}))


def test_compressions_are_counted_by_trigger_with_their_savings() -> None:
    metrics = Metrics()
    _compressed(metrics, "agent: preflight")
    _compressed(metrics, "agent: recovery", kind="static")
    _compressed(metrics, "hygiene: tokens", before=2000, after=1000)
    _compressed(metrics, "manual /compress")
    metrics.observe(AgentEvent(EVENT_COMPRESS_ABORTED, "s1", {"reason": "hygiene: message count"}))
    assert _value(metrics, "concord_compressions_total", trigger="preflight") == 1
    assert _value(metrics, "concord_compressions_total", trigger="error") == 1
    assert _value(metrics, "concord_compressions_total", trigger="manual") == 1
    assert _value(metrics, "concord_compression_tokens_saved_total", trigger="hygiene") == 1000
    assert _value(metrics, "concord_compression_savings_ratio_sum", trigger="preflight") == 0.75
    assert _value(metrics, "concord_compression_static_fallbacks_total", trigger="error") == 1
    assert _value(metrics, "concord_compressions_aborted_total", trigger="hygiene") == 1
    sweep = metrics.tagged("sweep")
    asyncio.run(sweep(AgentEvent(EVENT_COMPRESS, "s2", {
        "result": CompressionResult([], True, 9, 3, 900, 300), "compaction": SimpleNamespace(trigger="x")})))
    assert _value(metrics, "concord_compressions_total", trigger="sweep") == 1


def test_summary_failures_by_kind_and_bounded_model_labels() -> None:
    metrics = Metrics()
    metrics.record_summary_call(None, model="small", seconds=0.5, error="RateLimited")
    metrics.record_summary_call(Usage(prompt_tokens=100, completion_tokens=20, cache_write_tokens=80),
                                model="small", seconds=1.5)
    assert _value(metrics, "concord_summary_failures_total", kind="RateLimited") == 1
    assert _value(metrics, "concord_llm_request_seconds_count", model="small", purpose="summary") == 2
    assert _value(metrics, "concord_llm_tokens_total", model="small", purpose="summary", type="cache_write") == 80
    for n in range(MAX_MODEL_LABELS + 5):
        metrics.record_summary_call(Usage(prompt_tokens=1), model=f"model-{n}")
    models = {s.labels["model"] for f in metrics.instruments.registry.collect() for s in f.samples
              if "model" in s.labels}
    assert len(models) == MAX_MODEL_LABELS + 1 and "other" in models
