"""Context compression: the pluggable `ContextEngine` and the built-in `ContextCompressor` (see README.md).

The names below load on first use: a command that only needs one stage (``concord health`` reads the
configuration, which redacts with `agent.compression.redact`) does not load the whole compressor.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.compression.compressor import ContextCompressor
    from agent.compression.engine import CompressionResult, ContextEngine
    from agent.compression.feasibility import SummaryModelTooSmall
    from agent.compression.registry import (
        BUILTIN_ENGINE,
        EngineNotFound,
        create_context_engine,
        register_context_engine,
    )

_HOME = {
    "BUILTIN_ENGINE": "registry",
    "CompressionResult": "engine",
    "ContextCompressor": "compressor",
    "ContextEngine": "engine",
    "EngineNotFound": "registry",
    "SummaryModelTooSmall": "feasibility",
    "create_context_engine": "registry",
    "register_context_engine": "registry",
}

__all__ = [
    "BUILTIN_ENGINE",
    "CompressionResult",
    "ContextCompressor",
    "ContextEngine",
    "EngineNotFound",
    "SummaryModelTooSmall",
    "create_context_engine",
    "register_context_engine",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
