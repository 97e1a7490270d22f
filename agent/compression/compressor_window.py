"""The compressor's window and the budgets derived from it: `CompressorWindow`, a mixin of `ContextCompressor`.

It owns which window the engine plans for (the one it was built for, a smaller one an error stated, another
model's after failover or ``/model``), the output reserve, the threshold (lowered to what the summary model can
read, R-C9) and the request overhead a compaction plans against; `ContextCompressor` sets the fields it reads.
"""

from __future__ import annotations

from agent.compression.feasibility import feasible_threshold
from agent.compression.plan import PlanSettings
from agent.compression.threshold import (
    compute_threshold_tokens,
    max_summary_tokens,
    output_reserve,
    tail_token_budget,
)

__all__ = ["CompressorWindow"]


class CompressorWindow:
    """The window, its threshold and budgets (R-T4, R-T5, R-C9); its methods are `ContextCompressor`'s."""

    context_length: int
    threshold_tokens: int
    threshold_percent: float
    target_ratio: float
    protect_first_n: int
    protect_last_n: int
    summary_context_length: int | None
    _configured_max_tokens: int | None
    _reserve_output: bool
    _model_window: tuple[int, int | None]
    _overhead: int
    _summary_frame: int

    @property
    def max_tokens(self) -> int | None:
        """The output reserve: what every answer may take of the window (R-T4)."""
        if self._reserve_output:
            return output_reserve(self._configured_max_tokens, self.context_length)
        return self._configured_max_tokens

    def _apply_context_length(self, context_length: int) -> None:
        """Set the window and derive the threshold, lowered to what the summary model can read (R-C9)."""
        self.context_length = context_length
        configured = compute_threshold_tokens(context_length, self.threshold_percent, self.max_tokens)
        self.threshold_tokens = feasible_threshold(configured, context_length, self.summary_context_length)

    def set_request_overhead(self, tokens: int) -> None:
        """What every request carries besides its messages (the tool schemas), for planning a compaction."""
        self._overhead = max(0, int(tokens))

    def _plan_settings(self, lead: int = 0) -> PlanSettings:
        return PlanSettings(self.context_length, self.threshold_tokens, self.tail_token_budget, self.protect_first_n,
                            self.protect_last_n, self.max_tokens or 0, self._overhead, self._summary_frame, lead)

    def lower_context_length(self, context_length: int) -> int:
        """Shrink the window (error recovery: the provider stated a smaller one); returns the new threshold."""
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if context_length < self.context_length:
            self._apply_context_length(context_length)
        return self.threshold_tokens

    def use_window(self, context_length: int, max_tokens: int | None) -> None:
        """The model that answers changed (failover, ``/model``): budgets follow its window and output reserve.

        A window lowered after an overflow belonged to the previous model and goes with it; while another
        model than the engine's own answers, the exported state keeps the engine's own window, so a restart
        mid-episode does not keep the other model's window once the engine's own model is back."""
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if (context_length, max_tokens) == self._model_window:
            return
        self._model_window = (context_length, max_tokens)
        self._configured_max_tokens = max_tokens
        self._apply_context_length(context_length)

    @property
    def tail_token_budget(self) -> int:
        """Tokens the verbatim tail may hold: threshold × target_ratio (R-T5)."""
        return tail_token_budget(self.threshold_tokens, self.target_ratio)

    @property
    def max_summary_tokens(self) -> int:
        """Largest summary budget: 5% of the window, at most 12,000 (R-T5)."""
        return max_summary_tokens(self.context_length)
