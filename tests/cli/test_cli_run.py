"""`concord run` start-up errors: each is one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "gateway.cli.main", "run"], cwd=cwd, env={**base, **env},
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
        # A platform is configured (nothing listens at its API either): the port is the first thing to fail.
        result = _run({**LLM, "CONCORD_METRICS__PORT": str(port), "CONCORD_TELEGRAM__TOKEN": "1:x",
                       "CONCORD_TELEGRAM__API_BASE_URL": "http://127.0.0.1:9"}, tmp_path)
    assert result.returncode == 2
    assert f"metrics.port {port} on 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr
def test_no_platform_and_empty_stdin_exits_2_with_one_line(tmp_path: Path) -> None:
    # What Docker and systemd give a `concord run` without a platform token: /dev/null, at EOF at once.
    result = _run({**LLM, "CONCORD_STORAGE__DATA_DIR": str(tmp_path / "data")}, tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [next(line for line in lines if "no platform is configured" in line)], result.stderr
    assert "CONCORD_DISCORD__TOKEN" in lines[0] and "CONCORD_TELEGRAM__TOKEN" in lines[0]


def test_no_platform_and_a_pipe_closed_without_a_line_exits_2(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    result = subprocess.run([sys.executable, "-m", "gateway.cli.main", "run"], cwd=tmp_path, input="", text=True,
                            capture_output=True, timeout=60,
                            env={**base, **LLM, "PYTHONPATH": str(REPO),
                                 "CONCORD_STORAGE__DATA_DIR": str(tmp_path / "data")})
    assert result.returncode == 2
    assert "no platform is configured" in result.stderr and "Traceback" not in result.stderr


def _spawn(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.Popen([sys.executable, "-m", "gateway.cli.main", "run"], cwd=cwd, env={**base, **env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_second_run_on_the_same_sqlite_database_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    heartbeat = tmp_path / "heartbeat"
    env = {**LLM, "CONCORD_STORAGE__DATA_DIR": str(data), "CONCORD_GATEWAY__HEARTBEAT_FILE": str(heartbeat)}
    first = _spawn(env, tmp_path)
    try:
        _wait_for(heartbeat.exists, "the first gateway to start")  # the console waits for input meanwhile
        second = _run(env, tmp_path)
        assert second.returncode == 3
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "concord.db" in lines[0], second.stderr
        # The health check sees the running gateway.
        health = subprocess.run([sys.executable, "-m", "gateway.cli.main", "health"], cwd=tmp_path, text=True,
                                capture_output=True, timeout=60,
                                env={**os.environ, "PYTHONPATH": str(REPO),
                                     "CONCORD_GATEWAY__HEARTBEAT_FILE": str(heartbeat)})
        assert health.returncode == 0, health.stderr
    finally:
        _, err = first.communicate("/quit\n", timeout=60)
    assert first.returncode == 0, err
    assert not heartbeat.exists()  # removed on the way out: a stopped gateway is not healthy
    # With the first gone, the lock is free again.
    assert _run(env, tmp_path).returncode == 2  # (empty stdin, no platform: the usual one-line exit)


def test_health_without_a_heartbeat_is_unhealthy(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    run = [sys.executable, "-m", "gateway.cli.main", "health"]
    missing = subprocess.run(run, cwd=tmp_path, text=True, capture_output=True, timeout=60,
                             env={**base, "PYTHONPATH": str(REPO),
                                  "CONCORD_GATEWAY__HEARTBEAT_FILE": str(tmp_path / "none")})
    assert missing.returncode == 1 and "missing" in missing.stderr
    stale = tmp_path / "stale"
    stale.touch()
    os.utime(stale, (time.time() - 600, time.time() - 600))
    old = subprocess.run(run, cwd=tmp_path, text=True, capture_output=True, timeout=60,
                         env={**base, "PYTHONPATH": str(REPO), "CONCORD_GATEWAY__HEARTBEAT_FILE": str(stale)})
    assert old.returncode == 1 and re.search(r"6\d\d s old", old.stderr)
    unset = subprocess.run(run, cwd=tmp_path, text=True, capture_output=True, timeout=60,
                           env={**base, "PYTHONPATH": str(REPO)})
    assert unset.returncode == 2
