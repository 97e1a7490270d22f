"""A summary longer than asked, or cut at max_tokens, is shortened — not thrown away."""

from __future__ import annotations

from agent.compression.shorten import shorten_summary
from agent.tokens import TokenCounter, get_counter

COUNTER = get_counter()
BODY = "\n".join([
    "## Goal", "ship the release",
    "## Key Decisions", *(f"- decision {i}: " + "because of the benchmark figures " * 3 for i in range(30)),
    "## Critical Context", "- port 54329", "- deploys on Tuesdays",
])


def test_a_summary_within_its_budget_is_kept_as_it_is() -> None:
    assert shorten_summary(BODY, 10_000, COUNTER) == BODY


def test_a_summary_whose_bytes_fit_the_budget_is_not_tokenized_and_one_just_over_them_is() -> None:
    counter = TokenCounter()
    seen: list[str] = []
    real = counter.count_text
    counter.count_text = lambda t: seen.append(t) or real(t)  # type: ignore[method-assign]
    fits = len(BODY.encode()) + 1  # every line's bytes and one break each
    assert shorten_summary(BODY, fits, counter) == BODY and seen == []
    # One byte short of the bound: counted line by line (and kept: tokens are far fewer than bytes).
    assert shorten_summary(BODY, fits - 1, counter) == BODY and seen


def test_the_longest_section_loses_its_last_lines_first_and_every_header_stays() -> None:
    short = shorten_summary(BODY, 300, COUNTER)
    assert COUNTER.count_text(short) <= 300
    assert all(header in short for header in ("## Goal", "## Key Decisions", "## Critical Context"))
    assert "ship the release" in short and "- port 54329" in short and "- deploys on Tuesdays" in short
    assert "- decision 0:" in short and "- decision 29:" not in short


def test_a_line_cut_at_max_tokens_is_dropped() -> None:
    cut = "## Goal\nship the release\n## Critical Context\n- the staging database listens on po"
    assert shorten_summary(cut, 1_000, COUNTER, cut_off=True) == "## Goal\nship the release\n## Critical Context"
    assert shorten_summary(cut, 1_000, COUNTER).endswith("listens on po")


def test_one_enormous_line_keeps_its_head() -> None:
    text = "word " * 5_000
    short = shorten_summary(text, 100, COUNTER)
    assert COUNTER.count_text(short) <= 100 and text.startswith(short)
