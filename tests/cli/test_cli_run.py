"""`concord run` start-up errors: each is one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "gateway.cli", "run"], cwd=cwd, env={**base, **env},
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


# Nothing listens there: these runs must stop before any request is sent.
LLM = {"CONCORD_LLM__BASE_URL": "http://127.0.0.1:9/v1", "CONCORD_LLM__MODEL": "gpt-4o",
       "CONCORD_GATEWAY__SWEEP_CRON": "off"}


def test_unknown_context_engine_stops_startup(tmp_path: Path) -> None:
    result = _run({**LLM, "CONCORD_CONTEXT__ENGINE": "lcm"}, tmp_path)
    assert result.returncode == 2
    assert "context.engine 'lcm' not found" in result.stderr
    assert "Traceback" not in result.stderr


def test_far_too_small_summary_model_stops_startup(tmp_path: Path) -> None:
    env = {**LLM, "CONCORD_LLM__CONTEXT_LENGTH": "200000", "CONCORD_AUXILIARY__COMPRESSION__MODEL": "tiny",
           "CONCORD_AUXILIARY__COMPRESSION__CONTEXT_LENGTH": "4096"}
    result = _run(env, tmp_path)
    assert result.returncode == 2
    assert "summary model" in result.stderr.lower()
    assert "Traceback" not in result.stderr


def test_no_llm_configured_explains_what_to_set(tmp_path: Path) -> None:
    result = _run({}, tmp_path)
    assert result.returncode == 2
    assert "CONCORD_LLM__BASE_URL" in result.stderr and "CONCORD_LLM__MODEL" in result.stderr


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run({**LLM, "CONCORD_METRICS__PORT": str(port)}, tmp_path)
    assert result.returncode == 2
    assert f"metrics.port {port} on 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr
