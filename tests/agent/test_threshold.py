"""R-T4…R-T6: the worked threshold numbers and budgets."""

import pytest

from agent.compression.threshold import (
    autoraised_threshold_percent,
    compute_threshold_tokens,
    max_summary_tokens,
    output_reserve,
    pin_budget,
    request_room,
    summary_budget,
    summary_ceiling,
    summary_floor,
    summary_output_cap,
    tail_token_budget,
    tool_schema_budget,
    window_margin,
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
    assert summary_budget(30_000, 200_000, 100_000) == 6_000
    assert summary_budget(500_000, 200_000, 100_000) == 10_000
    assert summary_budget(8_000, 200_000, 100_000) == 2_000  # the 2,000 floor of R-T5 …
    assert summary_budget(1_000, 200_000, 100_000) == 400  # … but never 40% more than what it replaces


# What every budget is at the windows users run, with the default settings (threshold 0.50, target ratio 0.20,
# max_tokens unset): the threshold, the output reserve, the tail, the summary floor and ceiling, the tool
# schemas' and the pins' share, and the guard's margin.
WINDOWS = [
    # window, reserve, threshold, tail, floor, ceiling, tools, pins, margin
    (4_096, 1_024, 2_611, 522, 261, 261, 409, 409, 81),
    (8_192, 2_048, 5_222, 1_044, 522, 522, 819, 819, 163),
    (16_384, 4_096, 10_444, 2_088, 1_044, 1_044, 1_638, 1_638, 327),
    (32_768, 8_192, 20_889, 4_177, 2_000, 2_000, 3_276, 3_276, 655),
    (131_072, 8_192, 64_000, 12_800, 2_000, 6_553, 13_107, 13_107, 2_621),
    (200_000, 8_192, 95_904, 19_180, 2_000, 10_000, 20_000, 20_000, 4_000),
    (1_000_000, 8_192, 495_904, 99_180, 2_000, 12_000, 100_000, 100_000, 20_000),
]


@pytest.mark.parametrize(("window", "reserve", "threshold", "tail", "floor", "ceiling", "tools", "pins", "margin"),
                         WINDOWS)
def test_every_budget_derives_from_the_window(window: int, reserve: int, threshold: int, tail: int, floor: int,
                                              ceiling: int, tools: int, pins: int, margin: int) -> None:
    assert output_reserve(None, window) == reserve
    assert compute_threshold_tokens(window, 0.5, reserve) == threshold
    assert tail_token_budget(threshold, 0.20) == tail
    assert (summary_floor(threshold), summary_ceiling(window, threshold)) == (floor, ceiling)
    assert (tool_schema_budget(window), pin_budget(window), window_margin(window)) == (tools, pins, margin)
    # The summary's target and its max_tokens leave most of the threshold free: at most a fifth of it.
    assert summary_output_cap(ceiling) <= threshold * 0.2 or window >= 131_072
    # The guard: an answer of the reserve fits beside a prompt at the threshold, with the margin to spare.
    assert request_room(window, threshold) >= reserve


def test_the_summary_call_asks_for_what_its_prompt_asks_for() -> None:
    assert summary_output_cap(2_000) == 2_500
    assert summary_output_cap(261) == 326
    assert summary_output_cap(2_000, room=1_000) == 1_000
    assert summary_output_cap(2_000, room=0) == 1


def test_autoraise_only_for_listed_routes() -> None:
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.5) == 0.85
    assert autoraised_threshold_percent("Codex-OAuth", "GPT-5.5", 0.5) == 0.85
    assert autoraised_threshold_percent("openai", "gpt-5.5", 0.5) == 0.5
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.5, enabled=False) == 0.5
    assert autoraised_threshold_percent("codex-oauth", "gpt-5.5", 0.9) == 0.9
    assert autoraised_threshold_percent("x", "y", 0.5, routes=[("x", "y")]) == 0.85
