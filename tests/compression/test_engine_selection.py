"""R-E2: engine selection — plugin dir, then registration / entry point, else only the built-in default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from agent.compression import registry as engine_module
from agent.compression.compressor import ContextCompressor
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.registry import EngineNotFound, create_context_engine, register_context_engine

PLUGIN = '''
from agent.compression.engine import CompressionResult, ContextEngine


class KeepEverything(ContextEngine):
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def should_compress(self, prompt_tokens=None):
        return False

    async def compress(self, messages, current_tokens=None, focus_topic=None, force=False):
        n = len(messages)
        return CompressionResult(list(messages), False, n, n, 0, 0, reason="plugin keeps everything")

    def update_from_response(self, usage):
        pass


def create_engine(**kwargs):
    return KeepEverything(**kwargs)
'''


class Recording(ContextEngine):
    """A minimal third-party engine."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return False

    async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, force: bool = False) -> CompressionResult:
        return CompressionResult(list(messages), False, len(messages), len(messages), 0, 0)

    def update_from_response(self, usage: Any) -> None:
        return None


def make_recording(**kwargs: Any) -> Recording:
    """Entry-point target."""
    return Recording(**kwargs)


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "_registry", {})


def test_default_is_the_builtin_compressor(tmp_path: Path) -> None:
    engine = create_context_engine("compressor", plugin_root=tmp_path, context_length=200_000, summary_provider=None)
    assert isinstance(engine, ContextCompressor)


def test_a_plugin_dir_named_compressor_never_shadows_the_builtin(tmp_path: Path) -> None:
    (tmp_path / "compressor").mkdir()
    (tmp_path / "compressor" / "__init__.py").write_text(PLUGIN)
    engine = create_context_engine("compressor", plugin_root=tmp_path, context_length=200_000, summary_provider=None)
    assert isinstance(engine, ContextCompressor)


async def test_plugin_dir_wins_over_registration(tmp_path: Path) -> None:
    (tmp_path / "keeper").mkdir()
    (tmp_path / "keeper" / "__init__.py").write_text(PLUGIN)
    register_context_engine("keeper", make_recording)
    engine = create_context_engine("keeper", plugin_root=tmp_path, context_length=1000)
    assert type(engine).__name__ == "KeepEverything"
    assert engine.kwargs == {"context_length": 1000}  # type: ignore[attr-defined]
    result = await engine.compress([{"role": "user", "content": "hi"}])
    assert result.reason == "plugin keeps everything"


def test_registered_factory(tmp_path: Path) -> None:
    register_context_engine("recording", make_recording)
    engine = create_context_engine("recording", plugin_root=tmp_path, context_length=5)
    assert isinstance(engine, Recording) and engine.kwargs == {"context_length": 5}


def test_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    point = EntryPoint(name="from-ep", value=f"{__name__}:make_recording", group=engine_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(engine_module, "entry_points", lambda group: [point] if group == point.group else [])
    assert isinstance(create_context_engine("from-ep", plugin_root=tmp_path), Recording)


def test_unknown_name_is_an_error_listing_what_exists(tmp_path: Path) -> None:
    register_context_engine("recording", make_recording)
    with pytest.raises(EngineNotFound) as info:
        create_context_engine("lcm", plugin_root=tmp_path)
    message = str(info.value)
    assert "'lcm' not found" in message and "compressor" in message and "recording" in message


def test_plugin_dir_without_factory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("X = 1\n")
    with pytest.raises(EngineNotFound, match="create_engine"):
        create_context_engine("broken", plugin_root=tmp_path)


@pytest.mark.parametrize("name", ["", "compressor"])
def test_reserved_names_cannot_be_registered(name: str) -> None:
    with pytest.raises(ValueError):
        register_context_engine(name, make_recording)
