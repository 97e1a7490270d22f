"""``concord compress`` (agent.compression.cli)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from agent.compression.cli import build_parser, run_compress_command
from agent.llm.openai_compat import OpenAICompatProvider
from agent.transcript import PROGRESS_MIN_BYTES
from tests.compression.helpers import ScriptedProvider, coding_session, user
from tests.fakes.llm_server import FakeLLMServer

REQUIRED = {"messages_before", "messages_after", "tokens_before", "tokens_after", "savings_pct", "head_end",
            "tail_start", "pruned", "summary_kind", "aborted", "reason"}


def _write(path: Path, messages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_static_compress_writes_output_and_json_report(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", coding_session(30))
    out_path = tmp_path / "out.jsonl"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run_compress_command([str(src), "-o", str(out_path), "--context-length", "12000", "--summary", "static",
                                 "--json"], stdout=stdout, stderr=stderr)
    assert code == 0, stderr.getvalue()
    report = json.loads(stdout.getvalue())
    assert REQUIRED <= report.keys()
    assert report["summary_kind"] == "static" and report["tokens_after"] < report["tokens_before"]
    assert "no summary provider" not in report["reason"]  # static was asked for: no failure to report
    written = _read(out_path)
    assert len(written) == report["messages_after"] and written[-1] == coding_session(30)[-1]


def test_human_report_and_stdout_transcript(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", coding_session(30))
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run_compress_command(build_parser().parse_args([str(src), "--context-length", "12000", "--summary",
                                                           "static", "--focus", "m3"]), stdout=stdout, stderr=stderr)
    assert code == 0
    assert stderr.getvalue().startswith("Compressed 121 → ") and "summary: static" in stderr.getvalue()
    assert "no summary provider" not in stderr.getvalue() and "note:" not in stderr.getvalue()
    assert all(json.loads(line)["role"] for line in stdout.getvalue().splitlines())


def test_nothing_to_compress_is_exit_0_with_reason(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", [user("hi"), {"role": "assistant", "content": "hello"}])
    out_path = tmp_path / "out.jsonl"
    stdout = io.StringIO()
    code = run_compress_command([str(src), "-o", str(out_path), "--summary", "static"], stdout=stdout,
                                stderr=io.StringIO())
    assert code == 0 and stdout.getvalue().startswith("Nothing compressed: nothing to compress")
    assert len(_read(out_path)) == 2


def test_malformed_input_exits_2_naming_the_line(tmp_path: Path) -> None:
    cases = {
        '{"role": "user", "content": "ok"}\n{not json}\n': "line 2: invalid JSON",
        '{"role": "user", "content": "ok"}\n\n["a list"]\n': "line 3: expected a JSON object",
        '{"role": "wizard", "content": "x"}\n': "line 1: role must be one of",
        '{"role": "user", "content": 5}\n': "line 1: content must be",
        '{"role": "assistant", "tool_calls": "x"}\n': "line 1: tool_calls must be",
    }
    for text, expected in cases.items():
        src = tmp_path / "bad.jsonl"
        src.write_text(text, encoding="utf-8")
        stderr = io.StringIO()
        assert run_compress_command([str(src), "--summary", "static"], stdout=io.StringIO(), stderr=stderr) == 2
        assert expected in stderr.getvalue()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", coding_session(3))
    existing = _write(tmp_path / "out.jsonl", [])
    stderr = io.StringIO()
    assert run_compress_command([str(src), "-o", str(existing), "--summary", "static"], stderr=stderr) == 2
    assert "--force" in stderr.getvalue()
    assert run_compress_command([str(src), "-o", str(existing), "--summary", "static", "--force"],
                                stdout=io.StringIO(), stderr=io.StringIO()) == 0
    assert run_compress_command([str(src)], stderr=(err := io.StringIO())) == 2
    assert "--summary llm needs a configured summary model" in err.getvalue()
    assert run_compress_command([str(tmp_path / "missing.jsonl"), "--summary", "static"], stderr=io.StringIO()) == 2
    assert run_compress_command([str(src), "--threshold", "2", "--summary", "static"], stderr=io.StringIO()) == 2


def test_stdin_input(tmp_path: Path) -> None:
    stdin = io.StringIO("".join(json.dumps(m) + "\n" for m in coding_session(30)))
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run_compress_command(["-", "--summary", "static", "--context-length", "12000", "--json"], stdin=stdin,
                                stdout=stdout, stderr=stderr)
    assert code == 0 and json.loads(stderr.getvalue())["summary_kind"] == "static"


def test_llm_summary_uses_the_factory_and_closes_the_provider(tmp_path: Path) -> None:
    provider = ScriptedProvider(["## Goal\nfrom the llm"])
    src = _write(tmp_path / "in.jsonl", coding_session(30))
    stdout = io.StringIO()
    code = run_compress_command([str(src), "-o", str(tmp_path / "o.jsonl"), "--context-length", "12000", "--json"],
                                provider_factory=lambda: provider, stdout=stdout, stderr=io.StringIO())
    assert code == 0 and json.loads(stdout.getvalue())["summary_kind"] == "llm" and provider.closed


async def test_aborted_llm_summary_exits_1(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("auth")
    src = _write(tmp_path / "in.jsonl", coding_session(30))
    stdout = io.StringIO()
    # The CLI runs its own event loop; run it in a thread so the fake server keeps serving on this one.
    code = await asyncio.to_thread(
        run_compress_command,
        [str(src), "-o", str(tmp_path / "o.jsonl"), "--context-length", "12000", "--json"],
        provider_factory=lambda: OpenAICompatProvider(fake_llm.openai_base_url, "sk-x", "m", max_retries=0),
        stdout=stdout, stderr=io.StringIO())
    report = json.loads(stdout.getvalue())
    assert code == 1 and report["aborted"] and "frozen" in report["reason"]
    assert len(_read(tmp_path / "o.jsonl")) == 121


async def test_every_summary_request_fits_the_window_the_summary_model_is_served(
        tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    # The issue: --summary llm sent 33,863 tokens to a summary model served with 8,192.
    fake_llm.context_window = 12_000
    fake_llm.default_text = "## Goal\nfrom the llm"
    src = _write(tmp_path / "in.jsonl", coding_session(60))  # 33,642 tokens

    async def window() -> int:
        return 12_000  # what the server reports (gateway.cli.main asks it, as the gateway does)

    stdout = io.StringIO()
    code = await asyncio.to_thread(
        run_compress_command, [str(src), "-o", str(tmp_path / "o.jsonl"), "--context-length", "16000", "--json"],
        provider_factory=lambda: OpenAICompatProvider(fake_llm.openai_base_url, "sk-x", "m", max_retries=0),
        summary_window=window, stdout=stdout, stderr=io.StringIO())
    report = json.loads(stdout.getvalue())
    assert code == 0 and report["summary_kind"] == "llm"
    # The threshold was lowered to what the summary model can read (R-C9); every request fits it.
    assert fake_llm.requests and all(r.prompt_tokens + r.json["max_tokens"] <= 12_000 for r in fake_llm.requests)


def test_long_file_shows_progress_on_stderr(tmp_path: Path) -> None:
    messages = coding_session(30) + [user("x" * 2_000) for _ in range(PROGRESS_MIN_BYTES // 2_000)]
    src = _write(tmp_path / "big.jsonl", messages)
    stderr = _Terminal()
    code = run_compress_command([str(src), "-o", str(tmp_path / "o.jsonl"), "--summary", "static",
                                 "--context-length", "200000"], stdout=io.StringIO(), stderr=stderr)
    assert code == 0 and "reading transcript" in stderr.getvalue()
    quiet = _Terminal()
    small = _write(tmp_path / "small.jsonl", coding_session(3))
    run_compress_command([str(small), "-o", str(tmp_path / "o2.jsonl"), "--summary", "static"],
                         stdout=io.StringIO(), stderr=quiet)
    assert "reading transcript" not in quiet.getvalue(), "short files get no progress bar"


class _Terminal(io.StringIO):
    """stderr that claims to be a terminal, as rich draws progress bars only there."""

    def isatty(self) -> bool:
        return True
