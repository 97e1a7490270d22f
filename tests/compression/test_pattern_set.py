"""Compiled pattern sets are kept in the cache directory: the next process loads what the first compiled, and a
kept file that is damaged, refused, or for other expressions never changes what a scan finds."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cache_dir import cache_dir
from agent.compression import pattern_set
from agent.compression.pattern_set import PatternSet

hyperscan = pytest.importorskip("hyperscan")

EXPRESSIONS = ["error", r"/[a-z]+/[a-z]", r"\d+ ms"]
TEXT = "an error in /usr/lib after 40 ms"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "concord" / "hyperscan"


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the compilations from now on."""
    calls: list[int] = []
    real = hyperscan.Database

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hyperscan, "Database", counting)
    return calls


def _compile(expressions: list[str] = EXPRESSIONS) -> PatternSet:
    patterns = PatternSet.compile(expressions, what="test set", otherwise="-")
    assert patterns is not None
    return patterns


def test_a_set_is_compiled_once_and_loaded_after(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = _compiles(monkeypatch)
    first = _compile()
    kept = list(own_cache.glob("test-set-*.db"))
    assert len(kept) == 1 and compiles == [1]
    second = _compile()
    assert compiles == [1]
    assert sorted(first.occurring(TEXT)) == sorted(second.occurring(TEXT)) == [0, 1, 2]


def test_another_process_loads_the_kept_set(own_cache: Path) -> None:
    _compile()
    probe = ("import sys; from unittest import mock; import hyperscan;"
             "from agent.compression.pattern_set import PatternSet;"
             "mock.patch.object(hyperscan, 'Database', side_effect=AssertionError('compiled')).start();"
             f"print(sorted(PatternSet.compile({EXPRESSIONS!r}, what='test set', otherwise='-').occurring({TEXT!r})))")
    env = {**os.environ, "XDG_CACHE_HOME": str(own_cache.parent.parent)}
    env.pop("CACHE_DIRECTORY", None)
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[0, 1, 2]"


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "refused by hyperscan"])
def test_a_damaged_or_refused_file_is_compiled_again(own_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                     damage: str) -> None:
    _compile()
    (path,) = own_cache.glob("test-set-*.db")
    data = path.read_bytes()
    if damage == "flipped byte":
        data = data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:]
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = b""
    else:  # a digest that holds, over bytes Hyperscan does not take
        payload = b"not a hyperscan database" * 10
        data = hashlib.blake2b(payload, digest_size=32).digest() + payload
    path.write_bytes(data)
    compiles = _compiles(monkeypatch)
    assert sorted(_compile().occurring(TEXT)) == [0, 1, 2]
    assert compiles == [1]
    assert path.read_bytes() != data  # written again, whole
    assert sorted(_compile().occurring(TEXT)) == [0, 1, 2] and compiles == [1]


def test_other_expressions_replace_the_kept_set(own_cache: Path) -> None:
    _compile()
    changed = _compile([*EXPRESSIONS, "fatal"])
    kept = list(own_cache.glob("test-set-*.db"))
    assert len(kept) == 1
    assert sorted(changed.occurring(TEXT + " fatal")) == [0, 1, 2, 3]


def test_a_cache_that_cannot_be_written_only_means_compiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a directory cannot be made inside a file
    assert cache_dir("hyperscan") is None
    compiles = _compiles(monkeypatch)
    assert sorted(_compile().occurring(TEXT)) == [0, 1, 2]
    assert sorted(_compile().occurring(TEXT)) == [0, 1, 2]
    assert compiles == [1, 1]


def test_systemds_cache_directory_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", f"{tmp_path / 'unit'}:{tmp_path / 'other'}")
    assert cache_dir("hyperscan") == tmp_path / "unit" / "hyperscan"
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("hyperscan") == tmp_path / "home" / ".cache" / "concord" / "hyperscan"


def test_the_file_name_follows_what_the_set_is_made_of() -> None:
    name = pattern_set._file_name("evidence gates", "0.9.1", [b"a", b"b"], [0, 0])
    assert name.startswith("evidence-gates-") and name.endswith(".db")
    assert name != pattern_set._file_name("evidence gates", "0.9.2", [b"a", b"b"], [0, 0])
    assert name != pattern_set._file_name("evidence gates", "0.9.1", [b"a", b"c"], [0, 0])
    assert name != pattern_set._file_name("evidence gates", "0.9.1", [b"a", b"b"], [0, 1])
