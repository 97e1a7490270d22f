"""How a context engine is selected by name (R-E2).

Selection order for ``context.engine = NAME``: a plugin directory ``plugins/context_engine/NAME/`` (its
``__init__.py`` must define ``create_engine(**kwargs)``), then a factory registered with
`register_context_engine` or published under the entry-point group ``concord.context_engines``, then — only
for the default name "compressor" — the built-in `ContextCompressor`. A name the user typed that cannot be
found is an error, never a silent fallback.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.compression.engine import ContextEngine

__all__ = [
    "BUILTIN_ENGINE",
    "EngineNotFound",
    "create_context_engine",
    "register_context_engine",
    "resolve_engine_factory",
]

BUILTIN_ENGINE = "compressor"
ENTRY_POINT_GROUP = "concord.context_engines"

EngineFactory = Callable[..., ContextEngine]
_registry: dict[str, EngineFactory] = {}


class EngineNotFound(LookupError):
    """``context.engine`` names an engine that no plugin, registration or entry point provides."""


def register_context_engine(name: str, factory: EngineFactory) -> None:
    """Make an engine selectable as ``context.engine: NAME``."""
    if not name or name == BUILTIN_ENGINE:
        raise ValueError(f"cannot register an engine named {name!r}")
    _registry[name] = factory


def _load_plugin_dir(path: Path, name: str) -> EngineFactory:
    init = path / "__init__.py"
    spec = importlib.util.spec_from_file_location(f"concord_plugin_context_engine_{name}", init)
    if spec is None or spec.loader is None:
        raise EngineNotFound(f"context engine plugin {name!r} at {path} has no loadable __init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    factory = getattr(module, "create_engine", None)
    if not callable(factory):
        raise EngineNotFound(f"context engine plugin {name!r} at {path} does not define create_engine()")
    return factory


def resolve_engine_factory(name: str, plugin_root: Path | None = None) -> EngineFactory:
    """Find the factory for ``name`` following the documented order."""
    if name == BUILTIN_ENGINE:
        # The default is always the built-in; no plugin can shadow it (and no entry-point scan, ~5 ms, is paid).
        return ContextCompressor
    root = plugin_root if plugin_root is not None else Path.cwd() / "plugins" / "context_engine"
    if (root / name / "__init__.py").is_file():
        return _load_plugin_dir(root / name, name)
    if name in _registry:
        return _registry[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()
    known = sorted({BUILTIN_ENGINE, *_registry, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
    raise EngineNotFound(f"context.engine {name!r} not found (plugin dir {root / name}, registry, entry points); "
                         f"available: {', '.join(known)}")


def create_context_engine(name: str, plugin_root: Path | None = None, **kwargs: Any) -> ContextEngine:
    """Build the engine ``context.engine`` names, passing ``kwargs`` to its factory."""
    return resolve_engine_factory(name, plugin_root)(**kwargs)
