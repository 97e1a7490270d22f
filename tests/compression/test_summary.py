"""Summary prompt, handoff format and output validation (R-C3, R-C4)."""

from __future__ import annotations

import datetime

import pytest

from agent.compression.summary import (
    SECTIONS,
    SUMMARY_END_MARKER,
    SUMMARY_PREFIX,
    EmptySummary,
    build_summary_prompt,
    clean_summary_output,
    derive_focus_topic,
    find_latest_summary,
    format_summary,
    serialize_message,
    strip_summary,
    summary_body,
)
from tests.compression.helpers import assistant, call, user

DAY = datetime.date(2026, 5, 1)


def test_template_sections_in_order() -> None:
    prompt = build_summary_prompt("turns", budget=3_000, today=DAY)
    positions = [prompt.index(f"## {title}\n") for title, _ in SECTIONS]
    assert positions == sorted(positions)
    titles = [t for t, _ in SECTIONS]
    assert titles[0] == "Historical Task Snapshot" and titles[-1] == "Critical Context"
    assert len(titles) == 13
    assert "`N. ACTION target — outcome [tool: name]`" in prompt


def test_prompt_anchors_date_language_and_budget() -> None:
    prompt = build_summary_prompt("turns", budget=3_000, today=DAY)
    assert "Today's date is 2026-05-01" in prompt and '"done on 2026-05-01"' in prompt
    assert "conversation's own language" in prompt and "do not translate" in prompt
    assert "about 3,000 tokens" in prompt
    assert "PREVIOUS SUMMARY" not in prompt and "FOCUS TOPIC" not in prompt


def test_prompt_with_previous_summary_asks_for_an_update() -> None:
    prompt = build_summary_prompt("turns", budget=2_000, today=DAY, previous_summary="## Goal\nship v2")
    assert "UPDATE it" in prompt and "## Goal\nship v2" in prompt
    assert "Resolved Questions" in prompt.split("PREVIOUS SUMMARY:")[0]


def test_focus_topic_gets_60_to_70_percent() -> None:
    prompt = build_summary_prompt("turns", budget=2_000, today=DAY, focus_topic="database migration")
    assert "FOCUS TOPIC (requested by the user): database migration" in prompt and "60-70%" in prompt
    auto = build_summary_prompt("turns", budget=2_000, today=DAY, focus_topic="x", auto_focus=True)
    assert "inferred from the latest turns" in auto


def test_auto_focus_is_derived_from_last_user_turns() -> None:
    messages = [user("first"), assistant("a"), user("second"), user("third"), user("fourth ask")]
    assert derive_focus_topic(messages) == "second | third | fourth ask"


def test_auto_focus_ignores_handoff_summaries_in_user_messages() -> None:
    # A user-role summary, and a summary merged into the first tail user message, are not the user's asks.
    summary = format_summary("## Goal\nold goal with many details")
    messages = [user(summary), assistant("ok"), user(f"{summary}\n\nplease fix the parser"), assistant("on it")]
    topic = derive_focus_topic(messages)
    assert topic == "please fix the parser"
    assert SUMMARY_END_MARKER not in topic and "old goal" not in topic


def test_handoff_format_and_parse_round_trip() -> None:
    text = format_summary("## Goal\nship it")
    assert text.startswith(SUMMARY_PREFIX) and text.endswith(SUMMARY_END_MARKER)
    assert SUMMARY_END_MARKER == "--- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---"
    assert summary_body(text) == "## Goal\nship it"
    assert summary_body("hello") is None
    merged = text + "\n\nplease continue"
    assert summary_body(merged) == "## Goal\nship it" and strip_summary(merged) == "please continue"


def test_find_latest_summary_takes_the_newest() -> None:
    messages = [user(format_summary("old")), assistant("x"), assistant(format_summary("new")), user("go")]
    assert find_latest_summary(messages) == "new"
    assert find_latest_summary([user("plain")]) is None


@pytest.mark.parametrize("raw", ["", "   \n\t", "<think>long reasoning</think>\n  ", None])
def test_empty_output_is_a_failure(raw: object) -> None:
    with pytest.raises(EmptySummary):
        clean_summary_output(raw)


def test_output_is_cleaned_and_redacted() -> None:
    raw = f"<think>hmm</think>{SUMMARY_PREFIX}\n## Critical Context\nkey sk-proj-ABCDEFGHIJKLMNOPQRST\n{SUMMARY_END_MARKER}"
    assert clean_summary_output(raw) == "## Critical Context\nkey [REDACTED]"


def test_serialization_redacts_and_marks_old_summaries() -> None:
    messages = [user("my key is sk-proj-ABCDEFGHIJKLMNOPQRST"), call("c1", "bash", {"password": "hunter2xyz"}),
                user(format_summary("old body") + "\n\ncarry on")]
    text = "\n\n".join(serialize_message(m) for m in messages)
    assert "ABCDEFGHIJ" not in text and "hunter2xyz" not in text
    assert "old body" not in text and "carry on" in text and "→ call bash(" in text
