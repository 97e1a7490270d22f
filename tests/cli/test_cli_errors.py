"""Every CLI mistake gets one line on stderr and the documented exit code, never a traceback.

2 bad input or configuration, 3 storage, 1 aborted or not found; 141 (quietly) when stdout closes early.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.cli.main import build_parser, main
from gateway.store import Store

REPO = Path(__file__).resolve().parents[2]
GOOD = '{"role": "user", "content": "hello"}\n'


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def _one_line(err: str, prefix: str = "concord: error: ") -> str:
    """The one line of ``err``; an error starts like every other command's."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


MALFORMED: dict[str, bytes] = {
    "binary": bytes(range(256)) * 4,
    "png header": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "utf-16 with BOM": GOOD.encode("utf-16"),
    "utf-16 without BOM": GOOD.encode("utf-16-le"),
    "invalid utf-8": b'{"role": "user", "content": "caf\xe9"}\n',
    "truncated utf-8": b'{"role": "user", "content": "\xe2\x82"}\n',
    "deep nesting": b'{"role": "user", "content": "x", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
    "deep nesting unclosed": b"[" * 100_000 + b"\n",
    "10,000-digit number": b'{"role": "user", "content": "x", "n": ' + b"9" * 10_000 + b"}\n",
    "lone surrogate": b'{"role": "user", "content": "bad \\ud800 half"}\n',
    "surrogate in a key": b'{"role": "user", "content": "x", "\\udfff": 1}\n',
    "function as a string": b'{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": '
                            b'"function", "function": "read_file"}]}\n',
    "function name not a string": b'{"role": "assistant", "tool_calls": [{"id": "c1", "function": '
                                  b'{"name": 5, "arguments": "{}"}}]}\n',
    "arguments a number": b'{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", '
                          b'"arguments": 5}}]}\n',
    "tool_calls an object": b'{"role": "assistant", "tool_calls": {"id": "c1"}}\n',
    "content part not an object": b'{"role": "user", "content": ["hello"]}\n',
    "text part without text": b'{"role": "user", "content": [{"type": "text", "text": 7}]}\n',
    "tool_call_id a number": b'{"role": "tool", "tool_call_id": 7, "content": "x"}\n',
    "NaN role": b'{"role": NaN, "content": "x"}\n',
    "a bare string": b'"just a string"\n',
}


@pytest.mark.parametrize("case", list(MALFORMED))
@pytest.mark.parametrize("command", ["tokens", "compress"])
def test_malformed_transcript_is_one_line_and_exit_2(
        clean_env: Path, capsys: pytest.CaptureFixture[str], case: str, command: str) -> None:
    path = clean_env / "in.jsonl"
    path.write_bytes(MALFORMED[case])
    args = [command, str(path)] + (["--summary", "static", "-o", str(clean_env / "out.jsonl")]
                                   if command == "compress" else [])
    assert main(args) == 2
    line = _one_line(capsys.readouterr().err)
    assert "line 1" in line, line


def test_compress_output_is_a_directory(clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (clean_env / "in.jsonl").write_text(GOOD)
    (clean_env / "outdir").mkdir()
    assert main(["compress", str(clean_env / "in.jsonl"), "--summary", "static", "-o", str(clean_env / "outdir")]) == 2
    assert "is a directory" in _one_line(capsys.readouterr().err)


def test_input_is_a_directory(clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokens", str(clean_env)]) == 2
    assert "cannot read" in _one_line(capsys.readouterr().err)


def test_stdin_transcript_that_is_not_utf8(clean_env: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.cli.main", "compress", "-", "--summary", "static"],
                            input=b"\xff\xfe\x00garbage\n", capture_output=True, timeout=60, cwd=clean_env,
                            env={**_env(), "CONCORD_STORAGE__DATA_DIR": str(clean_env / "data")})
    assert result.returncode == 2
    _one_line(result.stderr.decode())


def test_utf8_bom_is_accepted(clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (clean_env / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert main(["tokens", str(clean_env / "bom.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == 1


@pytest.mark.parametrize("argv", [
    ["sessions", "restore", "x"],
    ["sessions", "restore", "x", "--before-compaction", "zero"],
    ["sessions", "restore", "x", "--before-compaction", "0"],
    ["sessions", "list", "--limit", "-5"],
    ["sessions", "list", "--platform", "irc"],
    ["tokens"],
    ["tokens", "f.jsonl", "--encoding", "gpt2"],
    ["compress", "f.jsonl", "--context-length", "lots"],
    ["health", "--max-age", "-1"],
    ["frobnicate"],
    [],
])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "--help" in _one_line(capsys.readouterr().err)


def _walk(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _walk(child, f"{path} {name}")
    return found


def test_every_subcommand_and_argument_has_help() -> None:
    parsers = _walk(build_parser(), "concord")
    assert len(parsers) > 12
    for path, parser in parsers:
        assert parser.description, f"{path} has no description"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"{path} {action.dest} has no help"


def test_run_help_explains_the_console_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Alt+Enter" in text and "Ctrl-C" in text and "Exit codes" in text


@pytest.mark.parametrize(("env", "fragment"), [
    ({"CONCORD_LLMM__MODEL": "gpt-4o"}, "CONCORD_LLMM__MODEL: unknown section 'llmm' (did you mean llm?)"),
    ({"CONCORD_LLM__MODELL": "gpt-4o"}, "llm.modell: unknown setting (did you mean llm.model?)"),
    ({"CONCORD_LLM__TEMPRATURE": "0.5"}, "llm.temprature: unknown setting (did you mean llm.temperature?)"),
    ({"CONCORD_AUXILIARY__COMPRESSION__MODLE": "m"},
     "auxiliary.compression.modle: unknown setting (did you mean auxiliary.compression.model?)"),
    ({"CONCORD_XYZZY__A": "1"}, "unknown section 'xyzzy' (sections: llm, compression,"),
    ({"CONCORD_LLM__CONTEXT_LENGTH": str(10**30)}, "llm.context_length"),
    ({"CONCORD_GATEWAY__IDLE_EXPIRY_MINUTES": "99999999999"}, "gateway.idle_expiry_minutes"),
    ({"CONCORD_REDIS__LOCK_TIMEOUT_SECONDS": "1e12"}, "redis.lock_timeout_seconds"),
    ({"CONCORD_GATEWAY__ADMINS": '["telegram:1", '}, "not valid JSON"),
    ({"CONCORD_GATEWAY__ADMINS": '[["telegram:1"]]'}, "only strings or numbers"),
])
def test_config_check_reports_typos_and_absurd_values(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str],
        fragment: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["config", "check"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_unknown_section_in_dotenv_file_is_reported(clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (clean_env / ".env").write_text("CONCORD_TELEGRAMM__TOKEN=123:abc\n")
    assert main(["config", "check"]) == 2
    err = capsys.readouterr().err
    assert "telegramm" in err.lower() and "123:abc" not in err


def test_json_lists_are_accepted_beside_comma_lists(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONCORD_GATEWAY__ADMINS", '["telegram:1", "discord:2"]')
    monkeypatch.setenv("CONCORD_DISCORD__ADMIN_ROLE_IDS", "[123, 456]")
    assert main(["config", "check"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gateway"]["admins"] == ["telegram:1", "discord:2"]
    assert data["discord"]["admin_role_ids"] == ["123", "456"]
    monkeypatch.setenv("CONCORD_GATEWAY__ADMINS", "telegram:1, discord:2")
    assert main(["config", "check"]) == 0
    assert json.loads(capsys.readouterr().out)["gateway"]["admins"] == ["telegram:1", "discord:2"]


def test_adapter_readme_settings_exist_and_reach_the_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.app.platforms import build_adapters
    from gateway.config import load_settings

    settings = load_settings(
        telegram={"token": "1:t", "webhook_path": "hook/abc", "admin_cache_seconds": 5, "drain_seconds": 2},
        discord={"token": "d", "max_image_bytes": 1_000_000, "drain_seconds": 3})
    discord, telegram = build_adapters(settings)
    assert (discord.settings.max_image_bytes, discord.settings.drain_seconds) == (1_000_000, 3)  # type: ignore[attr-defined]
    t = telegram.settings  # type: ignore[attr-defined]
    assert (t.webhook_path, t.admin_cache_seconds, t.drain_seconds) == ("hook/abc", 5, 2)
    readme = (REPO / "adapters" / "README.md").read_text()
    for name in ("webhook_path", "max_image_bytes", "admin_cache_seconds", "drain_seconds"):
        assert name in readme


# --- storage ----------------------------------------------------------------------------------------------


async def _seed(url: str, messages: int = 3) -> str:
    store = await Store.open(url)
    try:
        session = await store.sessions.get_or_create_active("console", "dm:you")
        rows = [{"role": "user", "content": f"message {i} " + "padding " * 20} for i in range(messages)]
        await store.messages.append(session.id, rows, [30] * messages)
        return session.id
    finally:
        await store.aclose()


def _db(data: Path) -> Path:
    return data / "concord.db"


def _future_schema(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")


def _corrupt_pages(db: Path) -> None:
    raw = bytearray(db.read_bytes())
    raw[100:] = b"\x5a" * (len(raw) - 100)  # header intact, every page garbage
    db.write_bytes(bytes(raw))


def _not_a_database(db: Path) -> None:
    db.write_bytes(b"this is not a database at all\n" * 200)


def _drop_messages(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE messages")


def _truncated(db: Path) -> None:
    raw = db.read_bytes()
    db.write_bytes(raw[: len(raw) // 3])


DAMAGE = {"future schema": _future_schema, "corrupt pages": _corrupt_pages, "not a database": _not_a_database,
          "dropped table": _drop_messages, "truncated file": _truncated}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_database_is_one_line_and_exit_3(clean_env: Path, capsys: pytest.CaptureFixture[str],
                                                 damage: str) -> None:
    data = clean_env / "data"
    session_id = asyncio.run(_seed(f"sqlite+aiosqlite:///{_db(data)}"))
    DAMAGE[damage](_db(data))
    capsys.readouterr()
    for argv in (["sessions", "list"], ["sessions", "export", session_id], ["db", "upgrade"]):
        assert main(argv) == 3, (damage, argv)
        _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("where", ["file", "proc"])
def test_unusable_data_dir_is_exit_3(clean_env: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str], where: str) -> None:
    if where == "file":
        (clean_env / "afile").write_text("x")
        monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(clean_env / "afile"))
    else:
        monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", "/proc/concord-data")
    for argv in (["sessions", "list"], ["db", "upgrade"]):
        assert main(argv) == 3, argv
        _one_line(capsys.readouterr().err)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def test_damaged_database_stops_run_with_one_line(clean_env: Path) -> None:
    data = clean_env / "data"
    asyncio.run(_seed(f"sqlite+aiosqlite:///{_db(data)}"))
    _future_schema(_db(data))
    env = {**_env(), "CONCORD_STORAGE__DATA_DIR": str(data), "CONCORD_LLM__BASE_URL": "http://127.0.0.1:9/v1",
           "CONCORD_LLM__MODEL": "gpt-4o", "CONCORD_GATEWAY__SWEEP_CRON": "off"}
    result = subprocess.run([sys.executable, "-m", "gateway.cli.main", "run"], cwd=clean_env, env=env, text=True,
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 3
    assert "newer Concord" in _one_line(result.stderr)


def test_closed_stdout_is_quiet(clean_env: Path) -> None:
    data = clean_env / "data"
    session_id = asyncio.run(_seed(f"sqlite+aiosqlite:///{_db(data)}", messages=3000))  # ~600 KB of JSONL
    env = {**_env(), "CONCORD_STORAGE__DATA_DIR": str(data)}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli.main", "sessions", "export", session_id], cwd=clean_env,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert json.loads(first)["role"] == "user"
    assert err == "", err


def test_ctrl_c_during_a_command_is_one_line(clean_env: Path) -> None:
    # A transcript on a pipe that never ends: the command waits for it until interrupted. Ctrl-C reaches a
    # foreground command at a terminal, so it starts with SIGINT's default action even when the suite itself
    # runs as a background job (which a shell without job control starts with SIGINT ignored).
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli.main", "tokens", "/dev/stdin"], cwd=clean_env,
                            env=_env(), stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(GOOD.encode())
    proc.stdin.flush()
    wchan = Path(f"/proc/{proc.pid}/wchan")
    deadline = time.monotonic() + 60
    while not wchan.read_text().endswith("pipe_read"):  # past start-up, blocked reading the transcript
        assert time.monotonic() < deadline, wchan.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    assert _one_line(proc.stderr.read().decode(), prefix="concord: ") == "concord: interrupted"
    proc.stdin.close()
