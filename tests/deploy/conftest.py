"""Deploy tests: the fake LLM server for runs of Concord the way deploy/ starts it, and the compose stack as
docker compose resolves it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.llm_fixture import fake_llm  # noqa: F401

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
# Only a PATH: whatever the stack needs must come from deploy/.env, as for an operator who exported nothing.
BARE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def stack_copy(root: Path, **settings: str) -> Path:
    """The repository's deploy/ under ``root`` with a deploy/.env made the documented way (a copy of
    .env.example), its ``settings`` filled in; ``root`` is where the commands run (the repository root)."""
    shutil.copytree(DEPLOY, root / "deploy")
    lines = []
    for line in (REPO / ".env.example").read_text().splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={settings.pop(key)}" if key in settings else line)
    assert not settings, f"not in .env.example: {sorted(settings)}"
    (root / "deploy" / ".env").write_text("\n".join(lines) + "\n")
    return root


def compose(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``docker compose -f deploy/docker-compose.yml ARGS`` in ``root``, with nothing exported."""
    assert COMPOSE is not None
    return subprocess.run([*COMPOSE, "-f", "deploy/docker-compose.yml", *args], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**BARE_ENV, **(env or {})})


def resolved(root: Path) -> dict[str, Any]:
    """The stack as compose resolves it (``config``)."""
    result = compose(root, "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)
