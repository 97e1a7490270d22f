"""Moving a context engine's state in and out of the store (durable anti-thrash counters, cooldowns, R-S1).

The built-in compressor exports a versioned dict; the store keeps the fields that must survive a restart as
columns (`EngineState`). Engines without ``export_state`` still persist their public counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.compression.engine import CompressionResult, ContextEngine
from gateway.store import CompactionInfo, EngineState

__all__ = ["compaction_info", "export_engine_state", "restore_engine_state"]

_STATE_VERSION = 1


def export_engine_state(engine: ContextEngine, last_compaction: CompactionInfo | None) -> EngineState:
    """The engine's persistent state as the store's record."""
    export = getattr(engine, "export_state", None)
    data: Mapping[str, Any] = export() if callable(export) else {}
    wall = data.get("cooldown_until_wall")
    return EngineState(
        last_prompt_tokens=int(data.get("last_prompt_tokens", engine.last_prompt_tokens)),
        previous_summary=data.get("previous_summary"),
        compression_count=int(data.get("compression_count", engine.compression_count)),
        ineffective_count=int(data.get("ineffective_count", getattr(engine, "ineffective_count", 0))),
        cooldown_until=datetime.fromtimestamp(float(wall), UTC) if wall else None,
        context_length=int(data.get("context_length", engine.context_length)) or None,
        last_compaction=last_compaction,
    )


def restore_engine_state(engine: ContextEngine, state: EngineState) -> None:
    """Load a stored state into a fresh engine (a no-op for engines that keep no state)."""
    load = getattr(engine, "load_state", None)
    if not callable(load):
        engine.last_prompt_tokens = state.last_prompt_tokens
        engine.compression_count = state.compression_count
        return
    load({
        "version": _STATE_VERSION,
        "context_length": state.context_length,
        "compression_count": state.compression_count,
        "ineffective_count": state.ineffective_count,
        "previous_summary": state.previous_summary,
        "cooldown_until_wall": state.cooldown_until.timestamp() if state.cooldown_until else None,
        "last_prompt_tokens": state.last_prompt_tokens,
    })


def compaction_info(result: CompressionResult, reason: str, at: datetime) -> CompactionInfo:
    """What /status shows about a compaction: when, why, and the figures the engine measured."""
    return CompactionInfo(at=at, reason=reason, tokens_before=result.tokens_before,
                          tokens_after=result.tokens_after, messages_before=result.messages_before,
                          messages_after=result.messages_after)
