"""The evidence extractor: exact facts from hand-written English and Chinese messages, and no rules from prose."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.compression import evidence
from agent.compression.evidence import Fact, extract_constraints, extract_facts, facts_of_message

RULES = [
    "Never push to main.",
    "Fix the login bug, but don't touch the migrations.",
    "Keep going, and always run the linter first.",
    "jkiv: just extract the deb and install it, make sure to first remove openoffice from the repository",
    "I'd rather use the staging database.",
    "Be sure to tag the release.",
    "Please remember to update the changelog.",
    "I don't know why it broke, but never deploy on Fridays.",
    "We don’t push on Fridays.",
    "Make sure you add both a 127.0.0.1 line and a 127.0.1.1 line to /etc/hosts.",
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
    "Or rather, the other one?",
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


ERRORS = [
    "src/vsla.c:243:14: error: conflicting types for ‘vsla_fill’",
    "dpkg: error: dpkg status database is locked by another process",
    "FAIL: test_page_with_dash (i18n.tests.UnprefixedDefaultLanguageTests)",
    "ERROR test_requests.py::TestRequests::test_cookie_persists_via_api",
    "test_x (pkg.tests.Case) ... FAIL",
    "Error fetching result: ON clause references tables to its right",
    "rm: cannot remove 'a.py': No such file or directory",
    "HrdwrBoB, I keep getting this: /lib/modules/2.6.8/build: No such file or directory.  Stop.",
]


@pytest.mark.parametrize("line", ERRORS)
def test_error_lines_of_failed_runs_are_found_whole(line: str) -> None:
    facts = facts_of_message({"role": "tool", "tool_call_id": "a", "content": f"collected 3 items\n{line}\ndone"}, 2)
    assert Fact("error", " ".join(line.split()), 2) in facts


def test_a_tracebacks_last_line_and_a_failed_results_message_are_error_lines() -> None:
    traceback = ("Traceback (most recent call last):\n  File \"/testbed/app.py\", line 52, in <module>\n"
                 "    path('admin/', admin.site.urls),\n                   ^^^^^^^^^^^^^^^\n"
                 "django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet.\nok")
    facts = facts_of_message({"role": "tool", "tool_call_id": "a", "content": traceback}, 3)
    assert [f.text for f in facts if f.kind == "error"] == [
        "django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet."]
    marked = {"role": "tool", "tool_call_id": "b", "content": "[error]\nFile has not been read yet. Read it first."}
    assert Fact("error", "File has not been read yet. Read it first.", 4) in facts_of_message(marked, 4)


def test_a_commands_exit_code_in_mini_swe_agent_output() -> None:
    messages = [{"role": "assistant", "content": "", "tool_calls": [_call("a", "bash", command="python x.py")]},
                {"role": "tool", "tool_call_id": "a", "content": "<returncode>2</returncode>\n<output>\n</output>"}]
    assert Fact("command", "python x.py → exit 2", 1) in extract_facts(messages, lambda i: i + 1)


def test_commands_a_chat_user_types() -> None:
    text = "bob: sudo apt-get install samba\n$ ls -la /srv\nsudo or gksudo if you use a GUI\nit costs $ 50"
    facts = facts_of_message({"role": "user", "content": text}, 5)
    assert [f.text for f in facts if f.kind == "command"] == ["sudo apt-get install samba", "ls -la /srv"]
    assert not [f for f in facts_of_message({"role": "tool", "tool_call_id": "x", "content": text}, 6)
                if f.kind == "command"]


def test_paths_urls_ids_and_numbers_with_units() -> None:
    text = ("Deploy https://example.com/api/v2?x=1 now. The build took 3.5 s and used 512 MB; see src/app/main.py, "
            "/etc/nginx/nginx.conf, ~/.bashrc, ./configure, /etc/init/ and config.yaml. Commit a1b2c3d4e, PR #123, version 1.2.3, booking ZFA04Y, "
            "user mia_li_3668, ticket OPS-1234, and/or whatever, then 42 plain.")
    facts = {(f.kind, f.text) for f in facts_of_message({"role": "user", "content": text}, 1)}
    assert {("url", "https://example.com/api/v2?x=1"), ("path", "src/app/main.py"),
            ("path", "/etc/nginx/nginx.conf"), ("path", "config.yaml"), ("path", "~/.bashrc"),
            ("path", "./configure"), ("path", "/etc/init/"), ("id", "a1b2c3d4e"), ("id", "PR #123"),
            ("id", "1.2.3"), ("id", "ZFA04Y"), ("id", "mia_li_3668"), ("id", "OPS-1234"),
            ("number", "3.5 s"), ("number", "512 MB")} <= facts
    assert not {t for k, t in facts if t in ("and/or", "42")}


def test_folders_and_extensionless_paths_in_what_tools_write() -> None:
    listing = ("CITATION.bib  build/  results/2025-07-v1/  __pycache__/\nsrc/_pytest/mark\nbuild/test/style\n"
               "cd /testbed && ls\n</output> sed '/def' `django/db/models/lookups.py`. and/or 1/2/3 a/b x/ 2024/01/02 https://x.io/a/b/c")
    paths = [f.text for f in facts_of_message({"role": "tool", "tool_call_id": "x", "content": listing}, 1)
             if f.kind == "path"]
    assert paths == ["CITATION.bib", "django/db/models/lookups.py", "build/", "results/2025-07-v1/", "__pycache__/",
                     "src/_pytest/mark", "build/test/style", "/testbed"]
    # A chat user's slashes list alternatives more often than they name folders.
    chat = facts_of_message({"role": "user", "content": "try sata/scsi/etc now/ or /join #ubuntu"}, 2)
    assert not [f for f in chat if f.kind == "path"]


def test_the_paths_a_command_names_are_facts_of_its_call() -> None:
    command = ("cd /testbed && python3 update.py < sympy/core/basic.py > sympy/core/basic.py.tmp && ls src/_pytest/ "
               "&& sed -i '/def old/d;s/NotImplemented/False/' a.py && ls build/")
    messages = [{"role": "assistant", "content": "", "tool_calls": [_call("a", "bash", command=command)]},
                {"role": "tool", "tool_call_id": "a", "content": "<returncode>0</returncode>"}]
    facts = extract_facts(messages, lambda i: i + 1, scan_chars=0)
    assert [f.text for f in facts if f.kind == "path"] == [
        "/testbed", "update.py", "sympy/core/basic.py", "sympy/core/basic.py.tmp", "src/_pytest/", "a.py"]


def test_paths_are_read_further_back_than_ids_urls_and_numbers() -> None:
    old = {"role": "tool", "tool_call_id": "x", "content": "docs/guide.md took 12 ms, see PR #42 " + "." * 300}
    new = {"role": "tool", "tool_call_id": "y", "content": "src/app.py took 3 ms " + "." * 300}
    facts = {(f.kind, f.text) for f in extract_facts([old, new], lambda i: i + 1, scan_chars=100, path_chars=400)}
    assert {("path", "docs/guide.md"), ("path", "src/app.py"), ("number", "3 ms")} <= facts
    assert not {("number", "12 ms"), ("id", "PR #42")} & facts
    # Without path_chars paths stop where the rest does; without scan_chars everything is read.
    assert ("path", "docs/guide.md") not in {(f.kind, f.text) for f in extract_facts([old, new], lambda i: i + 1,
                                                                                     scan_chars=100)}
    assert ("id", "PR #42") in {(f.kind, f.text) for f in extract_facts([old, new], lambda i: i + 1)}


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
