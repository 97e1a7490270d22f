"""The compressor's per-session state, and its JSON form for persistence across restarts.

Cooldowns run on a monotonic clock in memory (immune to wall-clock jumps) but are exported as wall-clock
expiry times, because a monotonic reading means nothing in another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.compression.redact import redact_secrets

__all__ = ["STATE_VERSION", "CompressorState"]

STATE_VERSION = 1


@dataclass(slots=True)
class CompressorState:
    """Mutable state of one `ContextCompressor` (one conversation)."""

    compression_count: int = 0
    ineffective_count: int = 0
    previous_summary: str | None = None
    cooldown_until: float = 0.0  # monotonic seconds
    auth_failure: bool = False
    network_failure: bool = False
    fell_back_to_main: bool = False
    last_compress_aborted: bool = False
    last_compress_reason: str = ""
    last_prompt_tokens: int = 0
    awaiting_real_usage: bool = False
    real_usage_fits: bool = False
    last_stats: dict[str, Any] | None = field(default=None)

    def reset(self) -> None:
        """Forget the conversation (``/new``); provider cooldowns are about the provider and are kept."""
        cooldown = self.cooldown_until
        fresh = CompressorState(cooldown_until=cooldown)
        for name in self.__slots__:
            setattr(self, name, getattr(fresh, name))

    def export(self, *, monotonic_now: float, wall_now: float, context_length: int) -> dict[str, Any]:
        """A JSON-serializable snapshot; the cooldown becomes a wall-clock expiry (or None)."""
        remaining = self.cooldown_until - monotonic_now
        return {
            "version": STATE_VERSION,
            "context_length": context_length,
            "compression_count": self.compression_count,
            "ineffective_count": self.ineffective_count,
            "previous_summary": self.previous_summary,
            "cooldown_until_wall": wall_now + remaining if remaining > 0 else None,
            "auth_failure": self.auth_failure,
            "network_failure": self.network_failure,
            "fell_back_to_main": self.fell_back_to_main,
            "last_compress_aborted": self.last_compress_aborted,
            "last_compress_reason": self.last_compress_reason,
            "last_prompt_tokens": self.last_prompt_tokens,
            "awaiting_real_usage": self.awaiting_real_usage,
            "real_usage_fits": self.real_usage_fits,
            "last_compression": self.last_stats,
        }

    @classmethod
    def load(cls, data: dict[str, Any], *, monotonic_now: float, wall_now: float) -> CompressorState:
        """Rebuild state from `export` output; an expired cooldown loads as none. Raises ValueError if invalid."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported compressor state (expected version {STATE_VERSION})")
        wall_until = data.get("cooldown_until_wall")
        remaining = float(wall_until) - wall_now if wall_until is not None else 0.0
        summary = data.get("previous_summary")
        stats = data.get("last_compression")
        last_prompt = int(data.get("last_prompt_tokens", 0))
        return cls(
            compression_count=int(data.get("compression_count", 0)),
            ineffective_count=int(data.get("ineffective_count", 0)),
            # Redacted again: the state may have been written before the redactor knew a secret's shape.
            previous_summary=redact_secrets(str(summary)) if summary else None,
            cooldown_until=monotonic_now + remaining if remaining > 0 else 0.0,
            auth_failure=bool(data.get("auth_failure", False)),
            network_failure=bool(data.get("network_failure", False)),
            fell_back_to_main=bool(data.get("fell_back_to_main", False)),
            last_compress_aborted=bool(data.get("last_compress_aborted", False)),
            last_compress_reason=str(data.get("last_compress_reason", "")),
            last_prompt_tokens=last_prompt,
            # -1 is the "just compressed" sentinel: a caller that stored only it still awaits real usage.
            awaiting_real_usage=bool(data.get("awaiting_real_usage", last_prompt == -1)),
            real_usage_fits=bool(data.get("real_usage_fits", False)),
            last_stats=dict(stats) if isinstance(stats, dict) else None,
        )
