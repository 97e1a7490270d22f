"""The group summary template: its sections and rules replace the task template's; updates keep decisions."""

from __future__ import annotations

import datetime

from agent.compression.summary import GROUP_SECTIONS, SECTIONS, build_summary_prompt

DAY = datetime.date(2026, 1, 2)


def test_group_prompt_uses_the_group_template() -> None:
    prompt = build_summary_prompt("[Ann] ship on Friday?\n[Bob] yes", budget=500, today=DAY, kind="group",
                                  previous_summary="## Participants\nAnn")
    assert all(f"## {title}" in prompt for title, _ in GROUP_SECTIONS)
    assert not any(f"## {title}" in prompt for title, _ in SECTIONS)
    assert "Attribute everything" in prompt and "keep every decision" in prompt
    assert prompt.endswith("[Ann] ship on Friday?\n[Bob] yes")


def test_task_prompt_is_unchanged_by_default() -> None:
    prompt = build_summary_prompt("user: fix the build", budget=500, today=DAY, previous_summary="## Goal\nx")
    assert all(f"## {title}" in prompt for title, _ in SECTIONS)
    assert "move finished in-progress items to Completed Actions" in prompt
    assert "## Participants" not in prompt
