"""Stage 4 assembly and repair passes (R-C5)."""

from __future__ import annotations

import json

import pytest

from agent.compression.assemble import (
    MEDIA_PLACEHOLDER,
    STUB_RESULT,
    assemble,
    choose_summary_role,
    sanitize_tool_pairs,
    strip_historical_media,
)
from tests.compression.helpers import assistant, call, image_part, result, system, user


@pytest.mark.parametrize(
    ("previous", "following", "expected"),
    [
        (None, "user", "assistant"),
        (None, "assistant", "user"),
        ("user", "user", "assistant"),
        ("assistant", "assistant", "user"),
        ("user", None, "assistant"),
        (None, None, "user"),
        ("user", "assistant", None),
        ("assistant", "user", None),
    ],
)
def test_role_choice_table(previous: str | None, following: str | None, expected: str | None) -> None:
    assert choose_summary_role(previous, following) == expected


def test_no_two_consecutive_same_roles_around_the_summary() -> None:
    out = assemble([system()], "SUMMARY", [user("live")])
    assert [m["role"] for m in out.messages] == ["system", "assistant", "user"]
    out = assemble([system()], "SUMMARY", [assistant("reply"), user("live")])
    assert [m["role"] for m in out.messages] == ["system", "user", "assistant", "user"]


def test_summary_merges_into_first_tail_message_when_both_roles_clash() -> None:
    out = assemble([system(), user("first")], "SUMMARY", [assistant("reply"), user("live")])
    assert out.summary_role == "merged"
    assert out.messages[2] == {"role": "assistant", "content": "SUMMARY\n\nreply"}
    parts = [{"type": "text", "text": "hi"}, image_part()]
    out = assemble([system(), assistant("a")], "S", [{"role": "user", "content": parts}])
    assert out.messages[2]["content"] == [{"type": "text", "text": "S"}, *parts]


def test_the_system_prompt_is_kept_byte_for_byte() -> None:
    prompt = system("base")
    out = assemble([prompt], "S", [user("x")])
    assert out.messages[0] is prompt and out.messages[0] == {"role": "system", "content": "base"}
    listed = {"role": "system", "content": [{"type": "text", "text": "p"}]}
    assert assemble([listed, user("a")], "S", [assistant("b"), user("x")]).messages[0] == listed


def test_orphan_results_dropped_and_missing_results_stubbed() -> None:
    messages = [
        result("gone", "orphan"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ]},
        result("a", "ra"),
        result("zzz", "not mine"),
        result("a", "duplicate"),
        user("next"),
        result("a", "late, after a user message"),
    ]
    out, dropped, stubbed, repaired = sanitize_tool_pairs(messages)
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["a", "b"]
    assert out[0]["role"] == "assistant" and out[1]["content"] == "ra" and out[2]["content"] == STUB_RESULT
    assert (dropped, stubbed, repaired) == (4, 1, 0)


def test_unparsable_arguments_are_repaired_anywhere() -> None:
    out, _, _, repaired = sanitize_tool_pairs([call("c", "t", "{not json"), result("c", "r")])
    assert repaired == 1
    assert json.loads(out[0]["tool_calls"][0]["function"]["arguments"]) == {"_unparsable_arguments": "{not json"}


def test_media_before_newest_user_image_is_stripped() -> None:
    old = {"role": "user", "content": [{"type": "text", "text": "old pic"}, image_part()]}
    tool_img = {"role": "tool", "tool_call_id": "c", "content": [image_part()]}
    newest = {"role": "user", "content": [{"type": "text", "text": "new pic"}, image_part("NEW")]}
    out, stripped = strip_historical_media([old, call("c", "t", {}), tool_img, newest, assistant("ok")])
    assert stripped == 2
    assert out[0]["content"] == [{"type": "text", "text": "old pic"}, {"type": "text", "text": MEDIA_PLACEHOLDER}]
    assert out[3] is newest
    assert old["content"][1]["type"] == "image_url", "input untouched"
    unchanged, none = strip_historical_media([old, assistant("no newer user image")])
    assert none == 0 and unchanged[0] is old
