"""R-T4…R-T6: the worked threshold numbers and budgets."""

import pytest

from agent.compression.threshold import (
    autoraised_threshold_percent,
    compute_threshold_tokens,
    max_summary_tokens,
    summary_budget,
    tail_token_budget,
)


@pytest.mark.parametrize(
    ("context_length", "percent", "max_tokens", "expected"),
    [
        (64_000, 0.5, None, 54_400),
        (128_000, 0.5, None, 64_000),
        (200_000, 0.5, None, 100_000),
        (131_072, 0.5, 65_536, 64_000),
        (1_000_000, 0.5, 65_536, 467_232),
        (100_000, 0.5, 100_000, 64_000),
        (32_000, 0.5, None, 27_200),
    ],
)
def test_worked_threshold_numbers(context_length: int, percent: float, max_tokens: int | None, expected: int) -> None:
    assert compute_threshold_tokens(context_length, percent, max_tokens) == expected


def test_threshold_is_at_least_one_and_below_the_window() -> None:
    assert compute_threshold_tokens(1, 0.5) == 1
    assert compute_threshold_tokens(10, 0.5) == 8
    for window in (2, 100, 1_000, 70_000, 75_000, 80_000):
        assert 1 <= compute_threshold_tokens(window, 0.5) < window


def test_200k_budgets() -> None:
    threshold = compute_threshold_tokens(200_000, 0.5)
    assert tail_token_budget(threshold, 0.20) == 20_000
    assert max_summary_tokens(200_000) == 10_000
    assert max_summary_tokens(1_000_000) == 12_000


def test_summary_budget_is_clamped() -> None:
    assert summary_budget(1_000, 200_000) == 2_000
    assert summary_budget(30_000, 200_000) == 6_000
    assert summary_budget(500_000, 200_000) == 10_000
    # A tiny window never pushes the budget under the 2,000 floor.
    assert summary_budget(50_000, 8_000) == 2_000


def test_autoraise_only_for_listed_routes() -> None:
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.5) == 0.85
    assert autoraised_threshold_percent("Codex-OAuth", "GPT-5.5", 0.5) == 0.85
    assert autoraised_threshold_percent("openai", "gpt-5.5", 0.5) == 0.5
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.5, enabled=False) == 0.5
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.9) == 0.9
    assert autoraised_threshold_percent("x", "y", 0.5, routes=[("x", "y")]) == 0.85
