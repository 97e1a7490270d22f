"""Prometheus instruments behind `gateway.ops.metrics.Metrics` (``/metrics``).

`Metrics` is the one place the gateway records what happens; each of its ``record_*`` / ``observe`` calls
also updates the matching instrument here. The instruments live in a registry of their own per `Metrics`
object (not prometheus-client's global one), so several runtimes in one process (tests) never collide.

Every label has a closed set of values (platforms, compression triggers, error class names, the configured
models), so the number of series stays bounded however long a worker runs.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["TRIGGERS", "Instruments", "trigger_of"]

# Seconds; a turn is one or more LLM calls, so the buckets reach minutes.
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)
_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60)

# /stats compression kinds → the trigger label Prometheus shows.
_TRIGGER_OF_KIND = {
    "agent: preflight": "preflight",
    "agent: post_response": "post_response",
    "agent: recovery": "error",
    "hygiene: tokens": "hygiene",
    "hygiene: messages": "hygiene",
    "manual /compress": "manual",
    "sweep": "sweep",
    "agent": "agent",
    "ahead of need": "ahead",
}
TRIGGERS = (*sorted(set(_TRIGGER_OF_KIND.values())), "other")


def trigger_of(kind: str) -> str:
    """The Prometheus ``trigger`` label of a /stats compression kind (unknown kinds share ``other``)."""
    return _TRIGGER_OF_KIND.get(kind, "other")


class Instruments:
    """The gateway's Prometheus series, in ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages_in = Counter("concord_messages_received", "Inbound messages taken for handling",
                                   ["platform"], registry=r)
        self.messages_out = Counter("concord_messages_sent", "Replies the platform confirmed", ["platform"],
                                    registry=r)
        self.duplicates = Counter("concord_inbound_duplicates", "Inbound messages dropped as already handled",
                                  ["platform"], registry=r)
        self.turns = Histogram("concord_turn_seconds", "Agent turn time (hygiene included)", ["outcome"],
                               buckets=_TURN_BUCKETS, registry=r)
        self.llm_seconds = Histogram("concord_llm_request_seconds", "LLM call time", ["model", "purpose"],
                                     buckets=_LLM_BUCKETS, registry=r)
        self.tokens = Counter("concord_llm_tokens", "Tokens reported by the provider",
                              ["model", "purpose", "type"], registry=r)
        self.compressions = Counter("concord_compressions", "Compressions done", ["trigger"], registry=r)
        self.tokens_saved = Counter("concord_compression_tokens_saved", "Tokens removed by compressions",
                                    ["trigger"], registry=r)
        self.savings = Histogram("concord_compression_savings_ratio", "Fraction of tokens one compression saved",
                                 ["trigger"], buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
                                 registry=r)
        self.static_fallbacks = Counter("concord_compression_static_fallbacks",
                                        "Compressions that used the static summary", ["trigger"], registry=r)
        self.aborted = Counter("concord_compressions_aborted", "Compressions that gave up (conversation unchanged)",
                               ["trigger"], registry=r)
        self.summary_failures = Counter("concord_summary_failures", "Failed summary calls by error kind",
                                        ["kind"], registry=r)
        self.lock_wait = Histogram("concord_lock_wait_seconds", "Time waited for a session's turn lock",
                                   buckets=_WAIT_BUCKETS, registry=r)
        self.lock_errors = Counter("concord_lock_backend_errors", "Lock backend (Redis) calls that failed",
                                   ["operation"], registry=r)
        self.redelivered = Counter("concord_answers_redelivered",
                                   "Stored answers sent again after a crash (delivery ledger)", ["outcome"],
                                   registry=r)
        self.queue_depth = Gauge("concord_queue_depth", "Inbound messages waiting or running in this worker",
                                 registry=r)

    def watch_queue(self, depth: Callable[[], float]) -> None:
        """Read the queue depth from ``depth`` at every scrape."""
        self.queue_depth.set_function(depth)
