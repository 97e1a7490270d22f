"""Context compression: the pluggable `ContextEngine` and the built-in `ContextCompressor` (see README.md)."""

from agent.compression.compressor import ContextCompressor
from agent.compression.engine import (
    BUILTIN_ENGINE,
    CompressionResult,
    ContextEngine,
    EngineNotFound,
    create_context_engine,
    register_context_engine,
)
from agent.compression.feasibility import SummaryModelTooSmall

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
