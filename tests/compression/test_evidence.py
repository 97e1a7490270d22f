"""The evidence extractor: exact facts from hand-written English and Chinese messages, and no rules from prose."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.compression import evidence
from agent.compression.evidence import Fact, extract_constraints, extract_facts, facts_of_message

RULES = [
    "Never push to main.",
    "You must use UTC timestamps in every log line.",
    "Please don't touch the migrations folder.",
    "Do not run the integration tests on the shared box.",
    "I prefer tabs over spaces.",
    "Only use the staging database.",
    "Always run the tests before committing.",
    "The output must be valid JSON.",
    "We should never deploy on Fridays.",
    "我们必须用 UTC 时间。",
    "不要改这个文件！",
    "永远不要在周五部署。",
    "只能用中文回答。",
    "回答一定要简短。",
    "别动生产数据库。",
]
PROSE = [
    "I must say this is great.",
    "Never mind, it works now.",
    "It must be a bug in the driver.",
    "I don't know why it fails.",
    "I always forget that flag.",
    "Do you always do this?",
    "I never thought of that.",
    "Don't worry about it.",
    "这只是一个测试。",
    "一定是网络问题。",
    "别人也遇到过。",
    "这两个版本有区别。",
    "他永远不会同意。",
    "要不要试试重启？",
]


@pytest.mark.parametrize("text", RULES)
def test_rules_in_english_and_chinese_are_found_whole(text: str) -> None:
    assert extract_constraints(f"Some context first. {text}\nAnd then more.") == [text]


@pytest.mark.parametrize("text", PROSE)
def test_prose_with_cue_words_is_not_a_rule(text: str) -> None:
    assert extract_constraints(text) == []


def test_rules_come_only_from_user_messages_and_speaker_tags_are_dropped() -> None:
    said = facts_of_message({"role": "user", "content": "[Ann] never deploy on Fridays. ok?"}, 7)
    assert Fact("constraint", "never deploy on Fridays.", 7) in said
    assert not [f for f in facts_of_message({"role": "assistant", "content": "Never push to main."}, 8)
                if f.kind == "constraint"]


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_commands_carry_their_exit_status_and_errors_their_whole_line() -> None:
    error = "ValueError: invalid literal for int() with base 10: 'abc' " + "(raised deep inside the parser) " * 8
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "bash", command="pytest -q tests/test_x.py")]},
        {"role": "tool", "tool_call_id": "a",
         "content": f"Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n{error}\nexit code 1"},
        {"role": "assistant", "content": "", "tool_calls": [_call("b", "bash", command="make build")]},
        {"role": "tool", "tool_call_id": "b", "content": "built 3 targets"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c", "bash", command="ls /nope")]},
    ]
    facts = extract_facts(messages, lambda i: 100 + i)
    commands = [f for f in facts if f.kind == "command"]
    assert commands == [Fact("command", "pytest -q tests/test_x.py → exit 1", 100),
                        Fact("command", "make build → ran", 102),
                        Fact("command", "ls /nope → no result recorded", 104)]
    [found] = [f for f in facts if f.kind == "error"]
    assert found == Fact("error", " ".join(error.split()), 101)  # the exception line, whole; not "Traceback"


def test_paths_urls_ids_and_numbers_with_units() -> None:
    text = ("Deploy https://example.com/api/v2?x=1 now. The build took 3.5 s and used 512 MB; see src/app/main.py, "
            "/etc/nginx/nginx.conf and config.yaml. Commit a1b2c3d4e, PR #123, version 1.2.3, booking ZFA04Y, "
            "user mia_li_3668, ticket OPS-1234, and/or whatever, then 42 plain.")
    facts = {(f.kind, f.text) for f in facts_of_message({"role": "user", "content": text}, 1)}
    assert {("url", "https://example.com/api/v2?x=1"), ("path", "src/app/main.py"),
            ("path", "/etc/nginx/nginx.conf"), ("path", "config.yaml"), ("id", "a1b2c3d4e"), ("id", "PR #123"),
            ("id", "1.2.3"), ("id", "ZFA04Y"), ("id", "mia_li_3668"), ("id", "OPS-1234"),
            ("number", "3.5 s"), ("number", "512 MB")} <= facts
    assert not {t for k, t in facts if t in ("and/or", "42")}


def test_secrets_are_redacted_and_summaries_give_nothing() -> None:
    key = "sk-proj-" + "Q7w8E9r0" * 5
    facts = facts_of_message({"role": "user", "content": f"Never share {key} with anyone."}, 3)
    assert facts and all(key not in f.text for f in facts)
    summary = {"role": "user", "content": "[CONTEXT COMPACTION — REFERENCE ONLY] ... src/app.py"}
    assert facts_of_message(summary, 4) == []
    assert facts_of_message({"role": "system", "content": "read src/app.py"}, 0) == []


def test_duplicates_keep_the_newest_message_number() -> None:
    messages = [{"role": "user", "content": "edit src/a.py"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "again src/a.py"}]
    assert [f for f in extract_facts(messages, lambda i: i + 1) if f.kind == "path"] == [Fact("path", "src/a.py", 3)]


def test_one_message_cannot_flood_a_kind() -> None:
    listing = "\n".join(f"src/module_{i}/file_{i}.py" for i in range(500))
    paths = [f for f in facts_of_message({"role": "tool", "tool_call_id": "x", "content": listing}, 1)
             if f.kind == "path"]
    assert 0 < len(paths) <= evidence._PER_MESSAGE["path"] < 500
