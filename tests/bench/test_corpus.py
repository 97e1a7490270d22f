"""bench.corpus: message invariants over the real corpus, counts against its READMEs, and each loader's
mapping on small hand-written files (those run without the corpus)."""

from __future__ import annotations

import ast
import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import corpus
from bench.corpus import (
    KINDS,
    NO_RESULT,
    QA,
    CorpusFormatError,
    Transcript,
    corpus_dir,
    iter_transcripts,
    load_all,
    load_claude_code,
    load_irc,
    load_locomo,
    load_miniswe,
    load_tau_bench,
)

_ROLES = {"system", "user", "assistant", "tool"}
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _content_problems(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str) or (content is None and message.get("tool_calls")):
        return []
    if isinstance(content, list) and content and all(
        isinstance(p, dict) and p.get("type") in ("text", "image_url") for p in content
    ):
        return []
    return [f"bad content {content!r:.60}"]


def violations(messages: list[dict[str, Any]]) -> list[str]:
    """Every way ``messages`` breaks the internal format; empty when it is valid."""
    problems: list[str] = []
    call_ids: set[str] = set()
    awaiting: list[str] = []  # ids of the last assistant's calls still owed a result, in order
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in _ROLES:
            problems.append(f"{i}: role {role!r}")
            continue
        if "name" in m and not _NAME.match(str(m["name"])):
            problems.append(f"{i}: name {m['name']!r}")
        problems += [f"{i}: {p}" for p in _content_problems(m)]
        if role == "tool":
            if not awaiting or m.get("tool_call_id") != awaiting[0]:
                problems.append(f"{i}: tool result {m.get('tool_call_id')!r} does not answer the next open call")
            else:
                awaiting.pop(0)
            continue
        if awaiting:
            problems.append(f"{i}: calls {awaiting} have no result before this {role} message")
            awaiting = []
        for call in m.get("tool_calls") or ():
            if role != "assistant":
                problems.append(f"{i}: tool_calls on a {role} message")
            fn = call.get("function") or {}
            if call.get("type") != "function" or not fn.get("name") or not isinstance(call.get("id"), str):
                problems.append(f"{i}: malformed call {call!r:.80}")
            try:
                if not isinstance(fn.get("arguments"), str):
                    raise TypeError
                json.loads(fn["arguments"])
            except (TypeError, ValueError):
                problems.append(f"{i}: arguments not a JSON string: {fn.get('arguments')!r:.60}")
            if call.get("id") in call_ids:
                problems.append(f"{i}: duplicate call id {call.get('id')}")
            call_ids.add(call.get("id"))
            awaiting.append(call.get("id"))
    if awaiting:
        problems.append(f"end: calls {awaiting} have no result")
    return problems


_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([{"role": "bot", "content": "x"}], "role"),
        ([{"role": "user", "content": None}], "bad content"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "bad content"),
        ([{"role": "user", "name": "a b", "content": "x"}], "name"),
        ([{"role": "tool", "tool_call_id": "c1", "content": "x"}], "does not answer"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [_CALL]}],
            "have no result",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": [_CALL]},
             {"role": "user", "content": "x"},
             {"role": "tool", "tool_call_id": "c1", "content": "x"}],
            "before this user",
        ),
        (
            [{"role": "assistant", "content": None,
              "tool_calls": [{**_CALL, "function": {"name": "f", "arguments": {"a": 1}}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "x"}],
            "JSON string",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": [_CALL]},
             {"role": "tool", "tool_call_id": "c1", "content": "x"},
             {"role": "assistant", "content": None, "tool_calls": [_CALL]},
             {"role": "tool", "tool_call_id": "c1", "content": "x"}],
            "duplicate call id",
        ),
    ],
)
def test_violations_catches_each_broken_invariant(messages: list[dict[str, Any]], fragment: str) -> None:
    assert any(fragment in p for p in violations(messages)), violations(messages)


# ------------------------------------------------------------------------------------------- the real corpus


@pytest.fixture(scope="module")
def transcripts(corpus_root: Path) -> list[Transcript]:
    return load_all(corpus_root)


def _by_kind(transcripts: list[Transcript], kind: str) -> list[Transcript]:
    return [t for t in transcripts if t.corpus == kind]


def test_every_kind_present_and_every_transcript_valid(transcripts: list[Transcript]) -> None:
    assert {t.corpus for t in transcripts} == set(KINDS)
    bad = {f"{t.corpus}/{t.name}": violations(t.messages)[:3] for t in transcripts if violations(t.messages)}
    assert not bad


def test_names_unique_and_synthesized_results_counted(transcripts: list[Transcript]) -> None:
    assert len({(t.corpus, t.name) for t in transcripts}) == len(transcripts)
    for t in transcripts:
        placeholders = sum(1 for m in t.messages if m["role"] == "tool" and m["content"] == NO_RESULT)
        assert placeholders == t.meta["synthesized_results"], t.name


def _readme_table(folder: Path, header_cell: str) -> dict[str, dict[str, str]]:
    """Rows (keyed by first cell) of the README markdown table whose header has ``header_cell``."""
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for line in (folder / "README.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells if header_cell in cells else None
        elif not set(cells[0]) <= {"-", ":"}:
            rows[cells[0]] = dict(zip(header, cells, strict=False))
    return rows


def test_miniswe_counts_match_readme(transcripts: list[Transcript], corpus_root: Path) -> None:
    table = _readme_table(corpus_root / "agent-traj-miniswe-gemini3pro", "assistant steps")
    items = _by_kind(transcripts, "miniswe")
    assert items
    for t in items:
        row = table[t.name]
        assert len(t.messages) == int(row["messages"])
        calls = sum(len(m.get("tool_calls") or ()) for m in t.messages)
        assert calls == int(row["assistant steps"]) - t.meta["format_errors"]
        assert t.meta["resolved"] is (row["resolved"] == "True")
        assert t.meta["synthesized_results"] == 0


def test_claude_code_counts_match_readme(transcripts: list[Transcript], corpus_root: Path) -> None:
    table = _readme_table(corpus_root / "agent-traj-claude-code-vsla", "tool_use")
    items = _by_kind(transcripts, "claude_code")
    assert items
    for t in items:
        row = table[f"{t.name}.jsonl"]
        assert len(t.meta["compact_summaries"]) == int(row["compact summaries"])
        calls = sum(len(m.get("tool_calls") or ()) for m in t.messages)
        results = sum(1 for m in t.messages if m["role"] == "tool") - t.meta["synthesized_results"]
        if int(row["sidechain lines"]) == 0:
            assert (calls, results) == (int(row["tool_use"]), int(row["tool_result"]))
        else:  # sub-agent calls are dropped with the sidechain
            assert 0 < calls < int(row["tool_use"])


def test_tau_bench_counts_match_readme(transcripts: list[Transcript]) -> None:
    items = _by_kind(transcripts, "tau_bench")
    roles = Counter(m["role"] for t in items for m in t.messages)
    # README: 200 trajectories; system 200, user 1,490, assistant 2,454, tool 1,164; rewards 84 × 1.0.
    assert len(items) == 200
    assert roles == {"system": 200, "user": 1490, "assistant": 2454, "tool": 1164}
    assert sum(t.meta["reward"] == 1.0 for t in items) == 84
    assert all(t.meta["synthesized_results"] == 0 and t.meta["orphans_dropped"] == 0 for t in items)
    assert sum(t.meta["ids_renamed"] for t in items) > 0  # upstream reuses call ids inside a trajectory


def test_irc_counts_match_readme(transcripts: list[Transcript], corpus_root: Path) -> None:
    readme = (corpus_root / "groupchat-irc-disentanglement" / "README.md").read_text(encoding="utf-8")
    rows = [ast.literal_eval(line.strip()) for line in readme.splitlines() if line.strip().startswith("('")]
    expected = {name.removesuffix(".raw.txt").removesuffix(".ascii.txt"): row for name, *row in rows}
    items = _by_kind(transcripts, "irc")
    assert items
    for t in items:
        readme_lines, _speakers, _chars, _tokens, links = expected[t.name.split("/")[-1]]
        raw = Path(t.meta["source"]).read_text(encoding="utf-8", errors="replace").split("\n")[:-1]
        # The README counted with str.splitlines, which also breaks at stray control characters (3 in one
        # log); the annotations number "\n"-separated lines, as the loader does.
        assert len(t.messages) + t.meta["skipped_lines"] == len(raw)
        assert abs(len(raw) - readme_lines) <= 0.01 * readme_lines
        assert len(t.meta["links"]) == links
        assert len(t.meta["lines"]) == len(t.messages)
        kept = set(t.meta["lines"])
        assert all("=== " in raw[n] for n in range(len(raw)) if n not in kept)  # only join/part/mode lines
        assert all(0 <= parent <= reply < len(raw) for parent, reply in t.meta["links"])


def test_locomo_counts_match_readme(transcripts: list[Transcript], corpus_root: Path) -> None:
    table = _readme_table(corpus_root / "qa-locomo", "sample_id")
    items = _by_kind(transcripts, "locomo")
    assert len(items) == 10
    for t in items:
        row = table[t.name]
        roles = Counter(m["role"] for m in t.messages)
        assert (roles["system"], roles["user"], len(t.meta["qa"])) == (
            int(row["sessions"]), int(row["turns"]), int(row["QA"]))
        assert set(t.meta["speakers"]) == {m["name"] for m in t.messages if m["role"] == "user"}
    qa = [q for t in items for q in t.meta["qa"]]
    assert Counter(q.category for q in qa) == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    evidence = [(t, e) for t in items for q in t.meta["qa"] for e in q.evidence]
    resolved = sum(e in t.meta["dia_index"] for t, e in evidence)
    assert resolved >= 0.995 * len(evidence)  # two upstream ids point at turns that do not exist


# ------------------------------------------------------------------------------------------- no corpus


def test_absent_root_yields_nothing_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bench.corpus"):
        assert list(iter_transcripts(tmp_path / "missing")) == []
    assert len(caplog.records) == 1 and "missing" in caplog.records[0].getMessage()


def test_env_override_and_absent_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CONCORD_CORPUS_DIR", str(tmp_path))
    assert corpus_dir() == tmp_path
    assert load_all() == []  # an existing but empty root is simply empty
    monkeypatch.setenv("CONCORD_CORPUS_DIR", str(tmp_path / "nope"))
    assert corpus_dir() is None
    with caplog.at_level(logging.WARNING, logger="bench.corpus"):
        assert load_all() == []
    assert "nope" in caplog.text and "CONCORD_CORPUS_DIR" in caplog.text


def test_default_location_is_next_to_the_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONCORD_CORPUS_DIR", raising=False)
    expected = Path(corpus.__file__).resolve().parent.parent.parent / "shared" / "corpus"
    assert corpus_dir() == (expected if expected.is_dir() else None)


def test_unknown_kind_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown corpus kind"):
        list(iter_transcripts(tmp_path, kinds=["slack"]))


def test_main_reports_absent_corpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("CONCORD_CORPUS_DIR", str(tmp_path / "nope"))
    corpus.main()
    assert "corpus not found" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- loaders, by hand


def _jsonl(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _assistant(mid: str, block: dict[str, Any], side: bool = False) -> dict[str, Any]:
    return {"type": "assistant", "isSidechain": side,
            "message": {"id": mid, "model": "claude-x", "role": "assistant", "content": [block]}}


def _user(content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "isSidechain": False, "message": {"role": "user", "content": content}, **extra}


def test_claude_code_mapping(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}
    path = _jsonl(tmp_path / "s.jsonl", [
        {"type": "summary", "summary": "Title", "leafUuid": "x"},
        _user("fix it"),
        _assistant("m1", {"type": "thinking", "thinking": "hmm", "signature": "s"}),
        _assistant("m1", {"type": "text", "text": "Looking."}),
        _assistant("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}),
        _assistant("side", {"type": "text", "text": "sub-agent"}, side=True),
        _assistant("m1", {"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "a"}}),
        {"type": "system", "content": "limit reached", "isSidechain": False},
        _user([{"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}]),
        _user([{"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "pic"}, image]},
               {"type": "text", "text": "and this"}]),
        _user("Caveat: local commands", isMeta=True),
        _user("This session is being continued…", isCompactSummary=True),
        _assistant("m2", {"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "exit"}}),
    ])
    [t] = load_claude_code(path)
    assert t.corpus == "claude_code" and t.name == "s"
    assert t.messages == [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}},
            {"id": "t2", "type": "function", "function": {"name": "Read", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "[error]\nboom"},
        {"role": "tool", "tool_call_id": "t2", "content": [
            {"type": "text", "text": "pic"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}]},
        {"role": "user", "content": "and this"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t3", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "exit"}'}}]},
        {"role": "tool", "tool_call_id": "t3", "content": NO_RESULT},
    ]
    assert t.meta["titles"] == ["Title"]
    assert t.meta["compact_summaries"] == [{"index": 5, "content": "This session is being continued…"}]
    assert t.meta["dropped"] == {"thinking_blocks_dropped": 1, "sidechain_events": 1, "system_events": 1,
                                 "meta_events": 1}
    assert (t.meta["tool_errors"], t.meta["synthesized_results"], t.meta["models"]) == (1, 1, ["claude-x"])
    assert not violations(t.messages)


def test_claude_code_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "summary"}\n{not json\n', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:2"):
        load_claude_code(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match="JSON object"):
        load_claude_code(path)


def _traj(tmp_path: Path, instance: str, contents: list[tuple[str, str]]) -> Path:
    trajs = tmp_path / "trajs"
    trajs.mkdir(exist_ok=True)
    path = trajs / f"{instance}.traj.json"
    data = {"instance_id": instance, "info": {"exit_status": "Submitted", "submission": "diff"},
            "messages": [{"role": r, "content": c, "extra": {}} for r, c in contents]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_miniswe_mapping(tmp_path: Path) -> None:
    (tmp_path / "results_summary.json").write_text(
        json.dumps({"instances": [{"instance_id": "pkg__pkg-1", "resolved": True}]}), encoding="utf-8")
    path = _traj(tmp_path, "pkg__pkg-1", [
        ("system", "sys"), ("user", "task"),
        ("assistant", "THOUGHT: look\n\n```bash\nls -la\n```"),
        ("user", "<returncode>0</returncode>\n<output>\na\n</output>"),
        ("assistant", "THOUGHT: two\n```bash\nls\n```\n```bash\npwd\n```"),
        ("user", "Please always provide EXACTLY ONE action in triple backticks."),
        ("assistant", "THOUGHT: slow\n```bash\nsleep 999\n```"),
        ("user", "The last command <command>sleep 999</command> timed out"),
        ("assistant", "THOUGHT: done\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
        ("user", "diff --git a/x b/x"),
    ])
    [t] = load_miniswe(path)
    call = t.messages[2]["tool_calls"][0]
    assert t.messages[2]["content"] == "THOUGHT: look"
    assert call["id"] == "call_pkg__pkg-1_1" and json.loads(call["function"]["arguments"]) == {"command": "ls -la"}
    assert [m["role"] for m in t.messages] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant", "tool"]
    assert "tool_calls" not in t.messages[4] and "```bash\npwd" in t.messages[4]["content"]
    assert [m["tool_call_id"] for m in t.messages if m["role"] == "tool"] == [
        "call_pkg__pkg-1_1", "call_pkg__pkg-1_3", "call_pkg__pkg-1_4"]
    assert t.meta["resolved"] is True and t.meta["format_errors"] == 1 and t.meta["submission"] == "diff"
    assert all("extra" not in m for m in t.messages)
    assert not violations(t.messages)


def test_miniswe_long_ids_stay_within_limit_and_unanswered_call_is_synthesized(tmp_path: Path) -> None:
    instance = "some-very-long-organisation__some-very-long-repository-name-12345"
    [t] = load_miniswe(_traj(tmp_path, instance, [("system", "s"), ("assistant", "```bash\nls\n```")]))
    assert len(t.messages[1]["tool_calls"][0]["id"]) <= 40
    assert t.messages[-1]["content"] == NO_RESULT and t.meta["synthesized_results"] == 1
    assert t.meta["resolved"] is None


def test_miniswe_rejects_wrong_shape(tmp_path: Path) -> None:
    path = tmp_path / "x.traj.json"
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match="messages"):
        load_miniswe(path)
    path.write_text("{oops", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match="not valid JSON"):
        load_miniswe(path)
    with pytest.raises(CorpusFormatError, match="unexpected role"):
        load_miniswe(_traj(tmp_path, "y", [("robot", "hi")]))


def test_tau_bench_repairs_arguments_ids_and_orphans(tmp_path: Path) -> None:
    def call(cid: str, arguments: Any) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": "f", "arguments": arguments}}

    traj = [
        {"role": "system", "content": "policy"},
        {"role": "tool", "tool_call_id": "ghost", "name": "f", "content": "orphan"},
        {"role": "assistant", "content": None, "tool_calls": [call("c", {"a": 1})]},
        {"role": "tool", "tool_call_id": "c", "name": "f", "content": "r1"},
        {"role": "assistant", "content": None, "tool_calls": [call("c", "not json")]},
        {"role": "tool", "tool_call_id": "c", "name": "f", "content": "r2"},
        {"role": "assistant", "content": "bye"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"task_id": 3, "trial": 1, "reward": 1.0, "traj": traj,
                                 "info": {"task": {"actions": [{"name": "f"}], "instruction": "be"}}}]))
    [t] = load_tau_bench(path)
    assert t.name == "t/task3_trial1"
    calls = [m["tool_calls"][0] for m in t.messages if m.get("tool_calls")]
    assert [c["id"] for c in calls] == ["c", "c_2"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"a": 1}, {"_raw": "not json"}]
    assert [(m["tool_call_id"], m["content"]) for m in t.messages if m["role"] == "tool"] == [
        ("c", "r1"), ("c_2", "r2")]
    assert (t.meta["arguments_repaired"], t.meta["ids_renamed"], t.meta["orphans_dropped"]) == (2, 1, 1)
    assert t.meta["reward"] == 1.0 and t.meta["actions"] == [{"name": "f"}]
    assert traj[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}  # the source is left untouched
    assert not violations(t.messages)
    path.write_text("{}")
    with pytest.raises(CorpusFormatError, match="array"):
        load_tau_bench(path)


def test_irc_mapping_keeps_line_numbers(tmp_path: Path) -> None:
    folder = tmp_path / "dev"
    folder.mkdir()
    log = folder / "2004-01-01_00.raw.txt"
    log.write_text(
        "[12:00] <al|ce> hi\x0bthere\n"
        "=== bob [~b@host]  has joined #ubuntu\n"
        "[12:01]  * bob waves\n"
        "[12:02] <bob> al|ce: hello \n"
        "rust 2018-05-29 [21:20:37] <carol>\t ping \n"
        "rust 2018-05-29 [21:20:38] -eval- 42 \n",
        encoding="utf-8",
    )
    (folder / "2004-01-01_00.annotation.txt").write_text("0 0 -\n0 3 -\n", encoding="utf-8")
    [t] = load_irc(log)
    assert t.name == "dev/2004-01-01_00"
    assert t.messages == [
        {"role": "user", "name": "al_ce", "content": "hi\x0bthere"},
        {"role": "user", "name": "bob", "content": "* bob waves"},
        {"role": "user", "name": "bob", "content": "al|ce: hello"},
        {"role": "user", "name": "carol", "content": "ping"},
        {"role": "user", "name": "eval", "content": "42"},
    ]
    assert t.meta["lines"] == [0, 2, 3, 4, 5] and t.meta["skipped_lines"] == 1
    assert t.meta["links"] == [(0, 0), (0, 3)]


def test_locomo_mapping(tmp_path: Path) -> None:
    data = [{
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo Li",
            "session_2_date_time": "2 May", "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "later"}],
            "session_1_date_time": "1 May", "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "hi"},
                {"speaker": "Bo Li", "dia_id": "D1:2", "text": "look", "blip_caption": "a cat", "img_url": ["u"]}],
        },
        "qa": [{"question": "When?", "answer": 2022, "evidence": ["D1:1; D02:01"], "category": 2},
               {"question": "Who?", "adversarial_answer": "Bo", "evidence": ["D:1:2"], "category": 5}],
    }]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    [t] = load_locomo(path)
    assert t.messages == [
        {"role": "system", "content": "[Session 1 — 1 May]"},
        {"role": "user", "name": "Ann", "content": "hi"},
        {"role": "user", "name": "Bo_Li", "content": "look [shares a photo: a cat]"},
        {"role": "system", "content": "[Session 2 — 2 May]"},
        {"role": "user", "name": "Ann", "content": "later"},
    ]
    assert t.meta["dia_index"] == {"D1:1": 1, "D1:2": 2, "D2:1": 4}
    assert t.meta["qa"] == [QA("When?", "2022", ("D1:1", "D2:1"), 2), QA("Who?", None, ("D1:2",), 5, "Bo")]


def test_discovery_finds_folders_by_pattern(tmp_path: Path) -> None:
    folder = tmp_path / "qa-locomo-copy"
    folder.mkdir()
    (folder / "x.json").write_text(json.dumps([{"sample_id": "c", "conversation": {}, "qa": []}]))
    (tmp_path / "unrelated").mkdir()
    found = list(iter_transcripts(tmp_path))
    assert [(t.corpus, t.name, t.messages) for t in found] == [("locomo", "c", [])]
    assert list(iter_transcripts(tmp_path, kinds=["irc"])) == []
