"""R-C9: summary-model feasibility."""

from __future__ import annotations

import pytest

from agent.compression.feasibility import SummaryModelTooSmall, feasible_threshold, summary_output_reserve
from tests.compression.helpers import make_compressor


def test_unknown_or_bigger_summary_window_keeps_threshold() -> None:
    assert feasible_threshold(100_000, 200_000, None) == 100_000
    assert feasible_threshold(100_000, 200_000, 400_000) == 100_000
    assert feasible_threshold(100_000, 200_000, 128_000) == 100_000


def test_smaller_summary_window_lowers_threshold() -> None:
    # The longest summary a 200K window asks for is 10,000 tokens; its max_tokens a quarter more.
    assert summary_output_reserve(200_000, 100_000) == 12_500
    assert feasible_threshold(100_000, 200_000, 64_000) == 64_000 - 2_000 - 12_500


def test_far_too_small_summary_model_is_refused() -> None:
    with pytest.raises(SummaryModelTooSmall, match="far too small"):
        feasible_threshold(100_000, 200_000, 32_000)
    with pytest.raises(SummaryModelTooSmall):
        make_compressor(context_length=200_000, summary_context_length=8_000)


def test_compressor_applies_the_lowered_threshold() -> None:
    compressor = make_compressor(context_length=200_000, summary_context_length=64_000)
    assert compressor.threshold_tokens == 49_500
    assert compressor.tail_token_budget == 9_900
