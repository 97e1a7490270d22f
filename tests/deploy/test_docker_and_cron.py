"""deploy/'s Docker files and cron file, checked the way Docker, docker compose and Debian's cron read them."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _compose_tool() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 timeout=30).returncode == 0:
        return ["docker", "compose"]
    return None


COMPOSE = _compose_tool()


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
    for path in ("pyproject.toml", "README.md", "gateway/cli.py", "agent/tokens.py", "adapters/console.py",
                 "gateway/store/migrations/env.py"):
        assert not _ignored(path, patterns), path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The repository's deploy/ with a .env made the documented way (cp .env.example .env)."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copy(REPO / ".env.example", tmp_path / ".env")
    return tmp_path


def _config(project: Path, *files: str) -> dict:
    assert COMPOSE is not None
    args = [part for name in files for part in ("-f", f"deploy/{name}")]
    result = subprocess.run([*COMPOSE, *args, "config"], cwd=project, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "POSTGRES_PASSWORD": "pw-for-test"})
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.mark.skipif(COMPOSE is None, reason="neither docker-compose nor the docker compose plugin is installed")
def test_compose_file_is_valid_and_overrides_the_host_settings(project: Path) -> None:
    concord = _config(project, "docker-compose.yml")["services"]["concord"]
    env = concord["environment"]
    # The container's own values win over .env, which was written for the host.
    assert env["CONCORD_STORAGE__DATA_DIR"] == "/data"
    assert env["CONCORD_TELEGRAM__WEBHOOK_LISTEN"] == "0.0.0.0"
    assert env["CONCORD_GATEWAY__HEARTBEAT_FILE"] == "/tmp/concord.heartbeat"
    assert env["CONCORD_STORAGE__DATABASE_URL"].startswith("postgresql+asyncpg://concord:pw-for-test@postgres")
    assert env["CONCORD_LLM__PROVIDER"] == "openai"  # and the rest comes from .env
    assert "ports" not in concord  # scaling workers must not fight over one host port


@pytest.mark.skipif(COMPOSE is None, reason="neither docker-compose nor the docker compose plugin is installed")
def test_webhook_override_publishes_the_port_on_the_hosts_loopback(project: Path) -> None:
    concord = _config(project, "docker-compose.yml", "docker-compose.webhook.yml")["services"]["concord"]
    [port] = concord["ports"]
    published = port if isinstance(port, str) else f"{port.get('host_ip')}:{port['published']}:{port['target']}"
    assert published.removesuffix("/tcp") == "127.0.0.1:8443:8443"


@pytest.mark.skipif(COMPOSE is None, reason="neither docker-compose nor the docker compose plugin is installed")
def test_compose_without_env_file_names_it(tmp_path: Path) -> None:
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    result = subprocess.run([*COMPOSE, "-f", "deploy/docker-compose.yml", "config"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "POSTGRES_PASSWORD": "x"})
    assert result.returncode != 0 and ".env" in result.stderr  # which is why README says `cp .env.example .env`
    assert "cp .env.example .env" in (REPO / "README.md").read_text()


# Debian's cron (run-parts naming) reads /etc/cron.d files whose names are only letters, digits, - and _.
_CRON_D_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CRON_FIELD = re.compile(r"^[\d*/,-]+$")


def test_cron_file_is_installable_in_cron_d_as_named() -> None:
    [cron] = [p for p in DEPLOY.iterdir() if "sweep" in p.name]
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
