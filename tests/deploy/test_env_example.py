""".env.example read by every program that reads a .env: python-dotenv (Concord itself), systemd's
``EnvironmentFile=`` parser and docker compose's ``env_file:``. All three must see the same values.

systemd's parser is its own code: ``load_env_file`` from ``libsystemd-shared``, called through ctypes.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dotenv import dotenv_values

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / ".env.example"
LIBSYSTEMD_SHARED = sorted(Path("/usr/lib/x86_64-linux-gnu/systemd").glob("libsystemd-shared-*.so")) + sorted(
    Path("/usr/lib/systemd").glob("libsystemd-shared-*.so"))


def _dotenv(path: Path) -> dict[str, str]:
    return {key: value or "" for key, value in dotenv_values(path).items()}


def _systemd(path: Path) -> dict[str, str]:
    lib = ctypes.CDLL(str(LIBSYSTEMD_SHARED[0]))
    lib.load_env_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p))]
    lib.load_env_file.restype = ctypes.c_int
    entries = ctypes.POINTER(ctypes.c_char_p)()
    assert lib.load_env_file(None, str(path).encode(), ctypes.byref(entries)) == 0
    values: dict[str, str] = {}
    index = 0
    while entries[index]:
        key, _, value = entries[index].decode().partition("=")
        values[key] = value
        index += 1
    return values


def _compose(path: Path, tmp_path: Path) -> dict[str, str]:
    tool = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
    (tmp_path / "compose.yml").write_text(f"services:\n  concord:\n    image: concord\n    env_file: {path}\n")
    result = subprocess.run([*tool, "-f", str(tmp_path / "compose.yml"), "config"], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    environment = yaml.safe_load(result.stdout)["services"]["concord"]["environment"]
    return {key: "" if value is None else str(value) for key, value in environment.items()}


def _compose_available() -> bool:
    if shutil.which("docker-compose"):
        return True
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


def test_comments_stand_on_their_own_lines() -> None:
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), start=1):
        if line.startswith("CONCORD_"):
            assert " #" not in line and "\t#" not in line, f".env.example:{number}: inline comment in {line!r}"


def test_python_dotenv_reads_every_key_without_comment_text() -> None:
    values = _dotenv(EXAMPLE)
    assert values["CONCORD_LLM__PROVIDER"] == "openai"
    assert values["CONCORD_GATEWAY__SWEEP_CRON"] == "*/30 * * * *"
    assert all("#" not in value for value in values.values()), values


@pytest.mark.skipif(not LIBSYSTEMD_SHARED, reason="libsystemd-shared (systemd's own env-file parser) is not installed")
def test_systemd_reads_it_as_python_dotenv_does() -> None:
    assert _systemd(EXAMPLE) == _dotenv(EXAMPLE)


@pytest.mark.skipif(not LIBSYSTEMD_SHARED, reason="libsystemd-shared (systemd's own env-file parser) is not installed")
def test_systemd_parser_is_the_real_one(tmp_path: Path) -> None:
    # What the old .env.example did: systemd keeps an inline comment as part of the value.
    env = tmp_path / "inline.env"
    env.write_text("CONCORD_LLM__PROVIDER=openai   # openai | anthropic\n")
    assert _systemd(env) == {"CONCORD_LLM__PROVIDER": "openai   # openai | anthropic"}


@pytest.mark.skipif(not _compose_available(), reason="neither docker-compose nor the docker compose plugin is installed")
def test_docker_compose_reads_it_as_python_dotenv_does(tmp_path: Path) -> None:
    assert _compose(EXAMPLE, tmp_path) == _dotenv(EXAMPLE)
