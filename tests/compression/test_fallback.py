"""The deterministic static fallback summary (R-C8)."""

from __future__ import annotations

from agent.compression.fallback import build_static_summary
from agent.compression.summary import format_summary
from tests.compression.helpers import TODAY, assistant, call, result, user


def _middle() -> list[dict]:
    return [
        user("Set up the FastAPI project"),
        call("c1", "write_file", {"path": "app/main.py", "content": "x"}),
        result("c1", "wrote 120 bytes"),
        call("c2", "terminal", {"command": "pytest -q"}),
        result("c2", "E   AssertionError: 3 != 4\n1 failed, 7 passed"),
        assistant("One test fails."),
        user("Fix the failing test, token is sk-proj-ABCDEFGHIJKLMNOPQRSTUV"),
    ]


def test_static_summary_lists_asks_actions_files_errors() -> None:
    text = build_static_summary(_middle(), today=TODAY)
    assert text.startswith("## Historical Task Snapshot\nFix the failing test")
    assert "## Goal\nSet up the FastAPI project" in text
    assert "## Completed Actions (all done before 2026-05-01)" in text
    assert "1. CALL write_file app/main.py — wrote 120 bytes [tool: write_file]" in text
    assert "2. CALL terminal pytest -q — E AssertionError: 3 != 4 [tool: terminal]" in text
    assert "## Blocked\n- E AssertionError: 3 != 4\n- 1 failed, 7 passed" in text
    assert "## Relevant Files\n- app/main.py" in text
    assert "sk-proj" not in text and "[REDACTED]" in text


def test_static_summary_is_deterministic_and_carries_previous() -> None:
    first = build_static_summary(_middle(), today=TODAY, previous_summary="## Goal\nolder goal")
    assert first == build_static_summary(_middle(), today=TODAY, previous_summary="## Goal\nolder goal")
    assert first.endswith("## Earlier Summary (carried over)\n## Goal\nolder goal")


def test_old_handoff_in_middle_is_not_taken_for_a_user_ask() -> None:
    middle = [user(format_summary("## Goal\nold")), assistant("ok"), user("new ask")]
    text = build_static_summary(middle, today=TODAY)
    assert "CONTEXT COMPACTION" not in text and "## Historical Task Snapshot\nnew ask" in text


def test_many_actions_are_bounded() -> None:
    middle = []
    for i in range(100):
        middle += [call(f"c{i}", "read_file", {"path": f"f{i}.py"}), result(f"c{i}", "content")]
    text = build_static_summary(middle, today=TODAY)
    assert "(60 earlier actions omitted)" in text and "100. CALL read_file f99.py" in text
    assert "61. CALL read_file f60.py" in text and "60. CALL" not in text
