"""`concord config check` and `concord tokens` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "gateway.cli.main", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def test_config_check_ok_and_masks_secrets(tmp_path: Path) -> None:
    result = _run(["config", "check"], tmp_path, {"CONCORD_LLM__API_KEY": "sk-verysecretvalue123"})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["llm"]["api_key"] == "**********"
    assert "sk-verysecretvalue123" not in result.stdout + result.stderr


def test_config_check_invalid_exits_nonzero(tmp_path: Path) -> None:
    result = _run(["config", "check"], tmp_path, {"CONCORD_PROMPT_CACHING__CACHE_TTL": "2h"})
    assert result.returncode == 2
    assert "prompt_caching.cache_ttl = '2h'" in result.stderr


def test_tokens_counts_a_transcript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "请帮我压缩上下文窗口"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print('hi')"},
    ]
    path.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in lines) + "\n\n")
    assert main(["tokens", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["messages"] == 4
    assert report["exact_tokens"] > 20
    assert report["rough_tokens"] > 0


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"role":"user","content":"ok"}\n{not json\n', "bad.jsonl: line 2: invalid JSON"),
        ('{"role":"user","content":"ok"}\n[1,2]\n', "line 2: expected a JSON object"),
        ('{"role":"narrator","content":"x"}\n', "line 1: role must be one of assistant, developer, system, tool, user, got 'narrator'"),
    ],
)
def test_tokens_malformed_input_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragment: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert main(["tokens", str(path)]) == 2
    assert fragment in capsys.readouterr().err


def test_tokens_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokens", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
