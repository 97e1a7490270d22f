"""deploy/concord.service: systemd parses it cleanly, and Concord runs under its hardening.

The sandbox test gives Concord exactly what the unit gives it: every mount read-only (``ProtectSystem=strict``,
emulated in a private mount namespace with ``unshare -m``), except the unit's ``StateDirectory=`` and
``CacheDirectory=``, with the unit's own ``Environment=`` lines and its working directory read-only too.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "concord.service"

# Everything becomes read-only except the directories given as arguments, then the command runs.
_READ_ONLY_EXCEPT = r"""
set -e
mount --make-rprivate /
for w in "$@"; do [ "$w" = "--" ] && break; mount --bind "$w" "$w"; done
writable=$(for w in "$@"; do [ "$w" = "--" ] && break; echo "$w"; done)
awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r mp; do
  case "$mp" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  echo "$writable" | grep -qx -- "$mp" && continue
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
while [ "$1" != "--" ]; do shift; done; shift
exec "$@"
"""


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values…]}}``: systemd's syntax (comments, repeated keys accumulate)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{line!r} outside a section"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unit_environment(service: dict[str, list[str]], state: Path, cache: Path) -> dict[str, str]:
    """The unit's ``Environment=`` assignments with ``%S`` / ``%C`` pointing at the given roots."""
    env: dict[str, str] = {}
    for line in service.get("Environment", []):
        for assignment in shlex.split(line.replace("%S", str(state)).replace("%C", str(cache))):
            key, _, value = assignment.partition("=")
            env[key] = value
    return env


SERVICE = parse_unit(UNIT)["Service"]


def test_unit_keeps_every_write_inside_its_own_directories() -> None:
    assert SERVICE["ProtectSystem"] == ["strict"] and SERVICE["PrivateTmp"] == ["true"]
    assert SERVICE["StateDirectory"] == ["concord"] and SERVICE["CacheDirectory"] == ["concord"]
    assert SERVICE["User"] == ["concord"]
    assert "ReadWritePaths" not in SERVICE  # only systemd's own directories are writable
    env = unit_environment(SERVICE, Path("/var/lib"), Path("/var/cache"))
    assert env["CONCORD_STORAGE__DATA_DIR"] == "/var/lib/concord"
    assert env["TIKTOKEN_CACHE_DIR"].startswith("/var/cache/concord/")
    assert env["TMPDIR"].startswith("/var/cache/concord")
    assert SERVICE["RestartPreventExitStatus"] == ["2"]  # a configuration error is not retried every 5 s
    # The user the unit runs as is created by the documented install step, in the unit and the README.
    assert "useradd --system" in UNIT.read_text()
    assert "useradd --system" in (REPO / "README.md").read_text()


def test_the_install_notes_name_a_real_readme_section_and_a_python_the_service_can_see() -> None:
    readme = (REPO / "README.md").read_text()
    [section] = re.findall(r'README\.md "([^"]+)"', UNIT.read_text())
    assert f"\n## {section}\n" in readme, section
    # ProtectHome=true hides /root and /home from the service: a pyenv interpreter there cannot run the venv.
    assert SERVICE["ProtectHome"] == ["true"]
    for text in (UNIT.read_text(), readme):
        assert "make PYTHON=/usr/bin/python3 .venv/.installed" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart exists; point it at this machine's concord, everything else unchanged.
    exec_start = SERVICE["ExecStart"][0].split()[0]
    unit = tmp_path / "concord.service"
    unit.write_text(UNIT.read_text().replace(exec_start, shutil.which("true") or "/bin/true"))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr  # no unknown keys or unparsable values


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --make-rprivate / && mount -o remount,bind,ro /"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and a private mount namespace (unshare -m)")
async def test_concord_runs_with_only_the_units_directories_writable(tmp_path: Path,
                                                                    fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("hello from the sandbox")
    state_root, cache_root = tmp_path / "var-lib", tmp_path / "var-cache"
    state, cache = state_root / "concord", cache_root / "concord"
    state.mkdir(parents=True)
    cache.mkdir(parents=True)  # systemd creates both before ExecStart, owned by User=
    workdir = tmp_path / "opt-concord"  # WorkingDirectory=, read-only like the rest
    workdir.mkdir()
    dotenv = (REPO / ".env.example").read_text()
    dotenv = dotenv.replace("CONCORD_LLM__BASE_URL=http://127.0.0.1:8080/v1",
                            f"CONCORD_LLM__BASE_URL={fake_llm.openai_base_url}")
    dotenv = dotenv.replace("CONCORD_LLM__MODEL=\n", "CONCORD_LLM__MODEL=fake-model\n")
    (workdir / ".env").write_text(dotenv)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "no-home"),
           **unit_environment(SERVICE, state_root, cache_root)}
    proc = await asyncio.create_subprocess_exec(
        "unshare", "-m", "sh", "-c", _READ_ONLY_EXCEPT, "sh", str(state), str(cache), "--",
        sys.executable, "-m", "gateway.cli.main", "run", cwd=workdir, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "hello from the sandbox" in out.decode()
    assert "Read-only file system" not in err.decode() and "Traceback" not in err.decode()
    assert (state / "concord.db").is_file()  # the data went to StateDirectory=
    assert any((cache / "tiktoken").iterdir())  # the tokenizer cache to CacheDirectory=
    assert not (workdir / "data").exists()
