"""The pluggable context engine (R-E1) and how one is selected by name (R-E2).

Selection order for ``context.engine = NAME``: a plugin directory ``plugins/context_engine/NAME/`` (its
``__init__.py`` must define ``create_engine(**kwargs)``), then a factory registered with
`register_context_engine` or published under the entry-point group ``concord.context_engines``, then — only
for the default name "compressor" — the built-in `ContextCompressor`. A name the user typed that cannot be
found is an error, never a silent fallback.
"""

from __future__ import annotations

import importlib.util
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_ENGINE",
    "CompressionResult",
    "ContextEngine",
    "EngineNotFound",
    "create_context_engine",
    "register_context_engine",
    "resolve_engine_factory",
]

BUILTIN_ENGINE = "compressor"
ENTRY_POINT_GROUP = "concord.context_engines"

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CompressionResult:
    """What one `compress` call did. ``messages`` is the new list (the input itself when nothing changed)."""

    messages: Messages
    compressed: bool
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary_kind: str = "none"  # llm | static | none
    aborted: bool = False
    reason: str = ""
    head_end: int = 0
    tail_start: int = 0
    pruned: int = 0
    # Exact token count of each of ``messages``, when the engine knows them (the built-in one does): the
    # store keeps them per row, so persisting the result tokenizes nothing. Empty when unknown.
    token_counts: tuple[int, ...] = ()

    @property
    def savings_pct(self) -> float:
        """Fraction of tokens saved, 0.0 when nothing was."""
        if self.tokens_before <= 0:
            return 0.0
        return max(0.0, 1.0 - self.tokens_after / self.tokens_before)

    def stats(self) -> dict[str, Any]:
        """The figures of this result without the messages (JSON-serializable; for reports and persistence)."""
        return {
            "compressed": self.compressed,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "savings_pct": round(self.savings_pct * 100, 2),
            "head_end": self.head_end,
            "tail_start": self.tail_start,
            "pruned": self.pruned,
            "summary_kind": self.summary_kind,
            "aborted": self.aborted,
            "reason": self.reason,
        }


class ContextEngine(ABC):
    """Decides when to compress a conversation and does it; tracks token usage from real responses."""

    last_prompt_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0
    # True when ``compress`` and ``will_summarize`` take ``token_counts=`` (one exact count per message,
    # which callers holding them pass so that nothing is re-tokenized); engines written before it existed
    # leave it False and are never passed any.
    accepts_token_counts: bool = False
    # Which summary template a summarizing engine writes: "task" (an agent at work) or "group" (a group chat's
    # participants, topics, decisions). Engines that write no summaries ignore it.
    summary_template: str = "task"

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the conversation should be compressed now (False while anti-thrash blocks it)."""

    @abstractmethod
    async def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> CompressionResult:
        """Return a compressed copy of ``messages`` (the input is never mutated)."""

    @abstractmethod
    def update_from_response(self, usage: Any) -> None:
        """Record the provider's real usage of the last call."""

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """False when everything is protected, so /compress can answer without an LLM call."""
        return len(messages) > 0

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False) -> bool:
        """Whether ``compress(messages, force=force)`` would call a model now: the "compacting…" notice is
        shown only then. Default: whenever there is content to compress (an engine that cannot tell says so)."""
        return self.has_content_to_compress(messages)

    def on_session_start(self, session_id: str, messages: Sequence[Mapping[str, Any]] = ()) -> None:  # noqa: B027
        """A session (re)starts with these messages; rehydrate state from them."""

    def on_session_end(self, session_id: str) -> None:  # noqa: B027
        """The session ended for good."""

    def on_session_reset(self) -> None:  # noqa: B027
        """Forget per-session state (``/new``)."""

    def set_request_overhead(self, tokens: int) -> None:  # noqa: B027
        """Every request carries ``tokens`` besides its messages (the tool schemas the agent sends): an engine
        planning a compaction's result against the whole request uses it; others ignore it."""

    def number_messages(self, first_seq: int) -> None:  # noqa: B027
        """The next ``compress`` call's first non-system message is stored as message number ``first_seq``
        (the rest follow one by one), so a summary can cite the numbers ``read_history`` opens.
        Engines that cite nothing ignore it."""

    def on_messages_stored(self, messages: Sequence[Mapping[str, Any]]) -> None:  # noqa: B027
        """``messages`` were just stored (a turn's, with its tool calls' results), off the answer's path: an
        engine may do now what a later compaction would otherwise do for them. Default: nothing."""

    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas (OpenAI function format) this engine offers the agent."""
        return []

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one of the engine's own tools."""
        raise KeyError(name)


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
        from agent.compression.compressor import ContextCompressor

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
