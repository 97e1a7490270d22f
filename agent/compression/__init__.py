"""Context compression: the pluggable `ContextEngine` and the built-in `ContextCompressor` (see README.md)."""

from agent.compression.compressor import ContextCompressor
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.feasibility import SummaryModelTooSmall
from agent.compression.registry import (
    BUILTIN_ENGINE,
    EngineNotFound,
    create_context_engine,
    register_context_engine,
)

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
