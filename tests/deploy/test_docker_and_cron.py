"""deploy/'s Docker files and cron file, checked the way Docker, docker compose and Debian's cron read them."""

from __future__ import annotations

import fnmatch
import re
import shutil
from pathlib import Path

import pytest

from tests.deploy.conftest import COMPOSE, DEPLOY, REPO, compose, resolved, stack_copy

needs_compose = pytest.mark.skipif(COMPOSE is None, reason="neither docker-compose nor docker compose is installed")


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, with line continuations joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_has_a_healthcheck_a_webhook_port_and_a_reachable_listen_address() -> None:
    instructions = _dockerfile()
    health = [args for name, args in instructions if name == "HEALTHCHECK"]
    assert health and '"concord", "health"' in health[0]
    assert ("EXPOSE", "8443") in instructions
    env = " ".join(args for name, args in instructions if name == "ENV")
    assert "CONCORD_TELEGRAM__WEBHOOK_LISTEN=0.0.0.0" in env and "CONCORD_GATEWAY__HEARTBEAT_FILE=" in env
    assert ("USER", "concord") in instructions


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        parts = path.split("/")
        if any(fnmatch.fnmatch("/".join(parts[:i]), bare) or fnmatch.fnmatch(parts[i - 1], bare)
               for i in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_venv_data_and_secrets_out_of_the_build_context() -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for path in (".venv/bin/python", "data/concord.db", ".env", ".git/config", "tests/conftest.py",
                 "gateway/__pycache__/cli.cpython-311.pyc"):
        assert _ignored(path, patterns), path
    # Everything the Dockerfile copies stays in the context.
    for path in ("pyproject.toml", "README.md", "gateway/cli/main.py", "agent/tokens.py", "adapters/console.py",
                 "gateway/store/migrations/env.py"):
        assert not _ignored(path, patterns), path


@needs_compose
def test_compose_file_overrides_the_settings_with_the_stacks_own(tmp_path: Path) -> None:
    concord = resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw-for-test"))["services"]["concord"]
    env = concord["environment"]
    # The container's own values win over deploy/.env.
    assert env["CONCORD_STORAGE__DATA_DIR"] == "/data"
    assert env["CONCORD_TELEGRAM__WEBHOOK_LISTEN"] == "0.0.0.0"
    assert env["CONCORD_GATEWAY__HEARTBEAT_FILE"] == "/tmp/concord.heartbeat"
    assert env["CONCORD_STORAGE__DATABASE_URL"].startswith("postgresql+asyncpg://concord:pw-for-test@postgres")
    assert env["CONCORD_LLM__PROVIDER"] == "openai"  # and the rest comes from deploy/.env


@needs_compose
def test_compose_without_its_env_file_names_it(tmp_path: Path) -> None:
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    result = compose(tmp_path, "config")
    assert result.returncode != 0 and ".env" in result.stderr  # which is why the guides say to make deploy/.env
    for guide in (REPO / "README.md", DEPLOY / "README.md"):
        assert "cp .env.example deploy/.env" in guide.read_text()


# Debian's cron (run-parts naming) reads /etc/cron.d files whose names are only letters, digits, - and _.
_CRON_D_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CRON_FIELD = re.compile(r"^[\d*/,-]+$")


def test_cron_file_is_installable_in_cron_d_as_named() -> None:
    # concord-sweep.service / .timer are the systemd way of running the same sweep.
    [cron] = [p for p in DEPLOY.iterdir() if "sweep" in p.name and p.suffix not in (".service", ".timer")]
    assert _CRON_D_NAME.match(cron.name), f"cron skips /etc/cron.d/{cron.name}"
    text = cron.read_text()
    assert f"/etc/cron.d/{cron.name}" in text  # says where it goes
    jobs = [line for line in text.splitlines() if line and not line.startswith("#") and "=" not in line.split()[0]]
    assert jobs, "no job line"
    for job in jobs:
        fields = job.split()
        assert all(_CRON_FIELD.match(f) for f in fields[:5]), job
        assert fields[5] == "concord"  # cron.d lines name the user
        assert "concord sweep" in job
    env = dict(line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Z_]+=", line))
    service = (DEPLOY / "concord.service").read_text()
    # The sweep uses the service's data and cache directories.
    assert env["CONCORD_STORAGE__DATA_DIR"] == "/var/lib/concord" and "StateDirectory=concord" in service
    assert env["TIKTOKEN_CACHE_DIR"].startswith("/var/cache/concord/") and "CacheDirectory=concord" in service

