"""`concord run` finds the window its server really serves before the first turn (no llm.context_length set)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer

REPO = Path(__file__).resolve().parents[2]


async def _run_console(server: FakeLLMServer, tmp_path: Path, lines: str) -> tuple[str, str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env.update({"PYTHONPATH": str(REPO), "CONCORD_LLM__BASE_URL": server.openai_base_url,
                "CONCORD_LLM__MODEL": "local", "CONCORD_STORAGE__DATA_DIR": str(tmp_path / "data"),
                "CONCORD_GATEWAY__SWEEP_CRON": "off"})
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli.main", "run", cwd=tmp_path, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(lines.encode()), timeout=90)
    return out.decode(), err.decode(), process.returncode or 0


@pytest.mark.parametrize(("style", "source"), [("llamacpp", "llama.cpp /props"),
                                               ("vllm", "vLLM /v1/models max_model_len")])
async def test_the_served_window_is_found_before_the_first_turn(fake_llm: FakeLLMServer, tmp_path: Path,
                                                                style: str, source: str) -> None:
    # "local" is in no table: without asking the server Concord would assume 128,000 tokens.
    fake_llm.reports_window = (style, 8_192)
    fake_llm.context_window = 8_192
    fake_llm.default_text = "hello there"
    out, err, code = await _run_console(fake_llm, tmp_path, "hi\n/status\n")
    assert code == 0, err
    [turn] = [r for r in fake_llm.requests if r.path.endswith("/chat/completions")]
    assert turn.json["max_tokens"] == 2_048  # a quarter of the served window, not of 128,000
    assert f"Window: 8,192 tokens, reported by the server ({source})" in out
    assert "Compression threshold: 5,222 tokens" in out
    log = (tmp_path / "data" / "concord.log").read_text() if (tmp_path / "data" / "concord.log").exists() else err
    assert f"context window of local: 8,192 tokens, reported by the server ({source})" in log
