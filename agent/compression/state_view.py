"""What a `ContextCompressor` tells about its conversation: `CompressorStateView`, a mixin of read-outs.

Each property reads (two also set) the per-conversation `CompressorState` the compressor holds in ``_state``:
the counters, the last compression's outcome and figures, the summary model's failure flags and cooldown, and
whether real usage proved the compacted list fits (R-P1). The ContextEngine contract has ``compression_count``
and ``last_prompt_tokens`` as fields, hence their setters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.compression.state import CompressorState

__all__ = ["CompressorStateView"]


class CompressorStateView:
    """Read-outs of ``_state`` (and ``_clock`` for the cooldown); its properties are `ContextCompressor`'s."""

    _state: CompressorState
    _clock: Callable[[], float]

    @property
    def compression_count(self) -> int:
        """Compressions done in this conversation."""
        return self._state.compression_count

    @compression_count.setter
    def compression_count(self, value: int) -> None:
        self._state.compression_count = value

    @property
    def last_prompt_tokens(self) -> int:
        """Real prompt tokens of the last main-model call; -1 just after a compression; 0 when unknown.

        Settable (the ContextEngine contract has it as a field): setting -1 marks "waiting for real usage".
        """
        return self._state.last_prompt_tokens

    @last_prompt_tokens.setter
    def last_prompt_tokens(self, value: int) -> None:
        self._state.last_prompt_tokens = value
        if value == -1:
            self._state.awaiting_real_usage = True
            self._state.real_usage_fits = False

    @property
    def ineffective_count(self) -> int:
        """Compressions in a row that did not help: the escalation level of the next one (R-C6)."""
        return self._state.ineffective_count

    @property
    def previous_summary(self) -> str | None:
        """Body of the summary the next compression will update."""
        return self._state.previous_summary

    @property
    def last_compress_aborted(self) -> bool:
        """Whether the last compression was aborted (R-C8)."""
        return self._state.last_compress_aborted

    @property
    def last_compress_reason(self) -> str:
        """Why the last compression aborted, fell back, or did nothing ('' after a clean LLM summary)."""
        return self._state.last_compress_reason

    @property
    def auth_failure(self) -> bool:
        """The last summary attempt failed with 401/403."""
        return self._state.auth_failure

    @property
    def network_failure(self) -> bool:
        """The last summary attempt failed because the connection or stream closed early."""
        return self._state.network_failure

    @property
    def cooldown_remaining(self) -> float:
        """Seconds before the summary model is tried again (0 when it may be)."""
        return max(0.0, self._state.cooldown_until - self._clock())

    @property
    def deferred_to_real_usage(self) -> bool:
        """See the module docstring: the preflight may trust real usage instead of its rough estimate."""
        return self._state.real_usage_fits

    @property
    def last_compression_stats(self) -> dict[str, Any] | None:
        """Figures of the last compression (also after a restart, from exported state)."""
        return self._state.last_stats
