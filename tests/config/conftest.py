"""Every settings test runs in an empty directory with no CONCORD_* variables leaking in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
