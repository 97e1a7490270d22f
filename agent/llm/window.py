"""The context window a model is really served with, how Concord knows it, and what it learns later.

At start-up the window is what the server reports (`window_probe`), capped by ``llm.context_length`` when
that is set. A server that does not say leaves the configured value, else the model table's (or an assumed
128,000) capped by a window learned earlier (kept per base URL and model across restarts through a
`WindowStore` the caller hands in). While running, the window can only shrink, and it does when the server
states a smaller one: an overflow error that names it (llama.cpp's ``n_ctx``, "maximum context length is N
tokens"), or prompts the server silently truncated (Ollama: ``usage.prompt_tokens`` well below what was sent,
and staying flat while more is sent — see `TruncationWatch`). What is learned is shared by every session on
the model, stored for the next start and logged once.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Protocol

from agent.llm.models import DEFAULT_BASE_URLS, DEFAULT_CONTEXT_LENGTH, ProviderSpec, known_context_length
from agent.llm.window_probe import WindowReport, probe_served_window

__all__ = [
    "CONFIGURED",
    "LEARNED_OVERFLOW",
    "LEARNED_TRUNCATION",
    "ServedWindow",
    "TruncationWatch",
    "WindowStore",
    "choose_window",
    "resolve_served_window",
    "window_key",
]

log = logging.getLogger(__name__)

CONFIGURED = "configured (llm.context_length)"
MIN_LEARNED_WINDOW = 512
LEARNED_OVERFLOW = "learned from the server's overflow error"
LEARNED_TRUNCATION = "learned from a prompt the server truncated"
TABLE = "Concord's model table"
ASSUMED = "assumed (the model is not in Concord's table and the server does not say)"


class WindowStore(Protocol):
    """Where learned windows outlive the process (the gateway keeps them in its database)."""

    async def recall(self, key: str) -> tuple[int, str] | None:
        """The window learned for ``key`` and how, or None."""

    async def remember(self, key: str, tokens: int, source: str) -> None:
        """Keep ``tokens`` as the window learned for ``key``."""


def window_key(base_url: str | None, model: str) -> str:
    """A short stable key for one model at one endpoint (fits any key column)."""
    return hashlib.sha256(f"{(base_url or '').rstrip('/')}\n{model}".encode()).hexdigest()[:40]


def choose_window(*, reported: WindowReport | None, configured: int | None, learned: tuple[int, str] | None,
                  table: int | None, default: int) -> tuple[int, str]:
    """The window to use and how it is known.

    A report is fresh truth (a server restarted with a bigger context is believed), capped by the configured
    value. Without one, a configured value is the operator's word (if it is wrong, the server's first
    overflow error lowers it again); only the table's guess or the default are capped by what was learned.
    """
    if reported is not None:
        if configured and configured < reported.tokens:
            return configured, f"{CONFIGURED}; the server reports {reported.tokens:,} ({reported.source})"
        return reported.tokens, f"reported by the server ({reported.source})"
    if configured:
        return configured, CONFIGURED
    base, source = (table, TABLE) if table else (default, ASSUMED)
    if learned is not None and learned[0] < base:
        return learned
    return base, source


@dataclass
class ServedWindow:
    """The window of one model at one endpoint as best known now; shared by every session using that model."""

    tokens: int
    source: str
    key: str = ""
    store: WindowStore | None = None
    _logged: set[int] = field(default_factory=set, repr=False)

    async def learn(self, tokens: int, source: str) -> bool:
        """Lower the window to ``tokens`` (never raise it); True when it changed. Persisted, logged once.
        A window below `MIN_LEARNED_WINDOW` is no chat model's: a broken server's figure is not spread."""
        if tokens >= self.tokens:
            return False
        if tokens < MIN_LEARNED_WINDOW:
            log.warning("the server states a window of %s tokens; not believed for other sessions", tokens)
            return False
        previous, self.tokens, self.source = self.tokens, tokens, source
        if tokens not in self._logged:
            self._logged.add(tokens)
            log.warning("context window lowered from %s to %s tokens (%s)", f"{previous:,}", f"{tokens:,}", source)
        if self.store is not None and self.key:
            try:
                await self.store.remember(self.key, tokens, source)
            except Exception as exc:  # persisting is best effort: the window is already in effect here
                log.warning("could not store the learned window (%s)", type(exc).__name__)
        return True

    def describe(self) -> str:
        """``"4,096 tokens, reported by the server (llama.cpp /props)"``."""
        return f"{self.tokens:,} tokens, {self.source}"


async def resolve_served_window(spec: ProviderSpec, *, store: WindowStore | None = None,
                                probe: bool = True) -> ServedWindow:
    """The window of the model ``spec`` names: asked of its server (OpenAI-compatible ones), then configured,
    learned earlier (``store``) or from the table, as `choose_window` decides."""
    base_url = spec.base_url or DEFAULT_BASE_URLS.get(spec.provider)
    key = window_key(base_url, spec.model)
    reported = None
    if probe and base_url and spec.provider != "anthropic":
        reported = await probe_served_window(base_url, spec.model, api_key=spec.api_key)
    learned = None
    if store is not None:
        try:
            learned = await store.recall(key)
        except Exception as exc:  # a window not recalled is only a less precise start
            log.warning("could not read the learned window (%s)", type(exc).__name__)
    table = known_context_length(spec.model)
    tokens, source = choose_window(reported=reported, configured=spec.context_length, learned=learned,
                                   table=table, default=DEFAULT_CONTEXT_LENGTH)
    return ServedWindow(tokens, source, key, store)


# A server that truncates reports about the same prompt size call after call while what is sent keeps growing;
# one that does not truncate reports growth in step with ours (tokenizers differ, but not by this much). The
# growth is judged over at least _MIN_GROWTH tokens sent, so a truncation that drops whole messages (its
# figure moving by a message) and a short line of growth are both read right.
_MIN_GROWTH = 256
_FLAT_SHARE = 0.25
_AGREEMENT = 0.1
# Below this share of what was sent a report may be a truncation (above it, the tokenizers just differ).
TRUNCATED_SHARE = 0.95
# No chat server truncates at fewer tokens; a smaller report is a server counting only the uncached part of
# the prompt (old Ollama did), which must never be mistaken for a window.
_MIN_WINDOW = 1_024


@dataclass
class TruncationWatch:
    """Spots a server that silently truncates prompts, from its usage reports (see the module docstring)."""

    # The first suspicious call of the current streak (sent, reported), and the largest report since.
    _anchor: tuple[int, int] | None = None
    _largest: int = 0

    @staticmethod
    def plausible(reported_tokens: int) -> bool:
        """Whether a report this large could be a truncation at all (the caller may skip counting otherwise)."""
        return reported_tokens >= _MIN_WINDOW

    def observe(self, sent_tokens: int, reported_tokens: int) -> int | None:
        """Feed one call: our count of what was sent and the server's ``prompt_tokens``. Returns the window
        the server must be serving once its reports have stayed flat, below what was sent, while at least
        `_MIN_GROWTH` more tokens were sent."""
        if not self.plausible(reported_tokens) or reported_tokens >= sent_tokens * TRUNCATED_SHARE:
            self._anchor = None
            return None
        if self._anchor is None or sent_tokens < self._anchor[0]:
            self._anchor, self._largest = (sent_tokens, reported_tokens), reported_tokens
            return None
        reported_before, grown = self._anchor[1], sent_tokens - self._anchor[0]
        self._largest = max(self._largest, reported_tokens)
        if grown < _MIN_GROWTH:
            return None
        moved = abs(reported_tokens - reported_before)
        if moved <= _FLAT_SHARE * grown and moved <= _AGREEMENT * max(reported_tokens, reported_before):
            self._anchor = None
            return self._largest
        self._anchor, self._largest = (sent_tokens, reported_tokens), reported_tokens
        return None
