"""The models Concord talks to: the main model and its fallbacks as one provider, the summary model, the
windows their servers serve them with, and the context engine built over them.

`main_provider_for` and `summary_provider_for` turn `Settings` into providers; `resolve_windows` asks the
servers (or what was learned, configured or tabled) which windows they serve; `engine_factory` builds the
context engine new sessions get, and `check_engine` builds one before start-up sends any request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.compression.engine import ContextEngine
from agent.compression.registry import resolve_engine_factory
from agent.llm.base import Provider
from agent.llm.failover import FailoverProvider, ModelRoute
from agent.llm.models import (
    ProviderSpec,
    build_provider,
    build_provider_from_spec,
    context_length_for,
    resolve_auxiliary,
    spec_from,
)
from agent.llm.window import ServedWindow, WindowStore, resolve_served_window
from gateway.config import Settings, summary_deadline_seconds

__all__ = [
    "as_chain",
    "check_engine",
    "engine_factory",
    "main_provider_for",
    "resolve_windows",
    "secret",
    "serve_fallback_windows",
    "summary_provider_for",
]

log = logging.getLogger(__name__)


def secret(value: object) -> str | None:
    """The plain text of a configured secret (None when unset)."""
    getter = getattr(value, "get_secret_value", None)
    return getter() if callable(getter) else None


def _provider_options(settings: Settings, base_url: str | None, timeout: float | None = None) -> dict[str, Any]:
    caching = settings.prompt_caching
    return {
        "timeout": timeout or settings.llm.timeout_seconds,
        # A base URL of one's own is usually a local server (llama.cpp, Ollama, vLLM) that wants no key.
        "require_api_key": base_url is None,
        # None: on where the route accepts cache_control (R-K2); False: the operator switched it off.
        "prompt_caching": None if caching.enabled else False,
        "cache_ttl": caching.cache_ttl,
    }


def main_provider_for(settings: Settings) -> FailoverProvider:
    """The configured models as one provider: the main model (``llm.*``, ``prompt_caching.*``) and the
    ``llm.fallbacks`` it fails over to, each with its own endpoint, key, window and deadline."""
    llm = settings.llm
    main = build_provider(llm.provider, llm.base_url, secret(llm.api_key), llm.model,
                          **_provider_options(settings, llm.base_url))
    routes = [_main_route(settings, main)]
    for fallback in llm.fallbacks:
        spec = resolve_auxiliary(llm, fallback)
        provider = build_provider_from_spec(spec, **_provider_options(settings, spec.base_url,
                                                                      fallback.timeout_seconds))
        routes.append(ModelRoute(fallback.label, provider, context_length_for(spec.model, spec.context_length),
                                 fallback.max_tokens))
    return FailoverProvider(routes, cooldown_seconds=llm.fallback_cooldown_seconds)


def _main_route(settings: Settings, provider: Provider) -> ModelRoute:
    llm = settings.llm
    return ModelRoute(llm.model or provider.model or "main", provider, context_length_for(llm.model, llm.context_length),
                      llm.max_tokens)


async def serve_fallback_windows(settings: Settings, chain: FailoverProvider, main: ServedWindow,
                                 store: WindowStore, *, probe: bool) -> None:
    """Each configured model's window as its server serves it: the main one's is ``main``; each fallback's is
    asked of its own server (configured, learned or from the table when it does not say)."""
    windows = [main]
    for fallback in settings.llm.fallbacks[: len(chain.routes) - 1]:
        spec = resolve_auxiliary(settings.llm, fallback)
        windows.append(await resolve_served_window(spec, store=store, probe=probe))
        log.info("context window of the fallback %s: %s", fallback.label, windows[-1].describe())
    chain.serve_windows(windows)


def as_chain(settings: Settings, provider: Provider) -> FailoverProvider:
    """``provider`` as a chain of models (a pre-built one, as tests pass, is the main model alone)."""
    if isinstance(provider, FailoverProvider):
        return provider
    return FailoverProvider([_main_route(settings, provider)], cooldown_seconds=settings.llm.fallback_cooldown_seconds)


def summary_provider_for(settings: Settings, main: Provider | None = None) -> Provider:
    """The summary model's provider (``auxiliary.compression``, falling back to ``llm``); ``main`` is reused
    when the summary model is the main model with the same deadline."""
    spec = resolve_auxiliary(settings.llm, settings.auxiliary.compression)
    timeout = settings.auxiliary.compression.timeout_seconds
    if main is not None and spec.model == settings.llm.model and timeout in (None, settings.llm.timeout_seconds):
        return main
    return build_provider_from_spec(spec, **_provider_options(settings, spec.base_url, timeout))


def _same_endpoint(a: ProviderSpec, b: ProviderSpec) -> bool:
    return (a.provider, a.model, a.effective_base_url) == (b.provider, b.model, b.effective_base_url)


async def resolve_windows(settings: Settings, store: WindowStore | None = None, *,
                          probe: bool = True, announce: bool = True) -> tuple[ServedWindow, ServedWindow]:
    """The windows the main and the summary model are served with (the same object when they are the same
    model at the same endpoint), each logged once (``announce``) with how it is known."""
    main_spec = spec_from(settings.llm)
    aux_spec = resolve_auxiliary(settings.llm, settings.auxiliary.compression)
    main = await resolve_served_window(main_spec, store=store, probe=probe)
    summary = main if _same_endpoint(aux_spec, main_spec) else \
        await resolve_served_window(aux_spec, store=store, probe=probe)
    if announce:
        log.info("context window of %s: %s", main_spec.model or "the model", main.describe())
        if summary is not main:
            log.info("context window of the summary model %s: %s", aux_spec.model, summary.describe())
    return main, summary


async def check_engine(settings: Settings) -> None:
    """Build one engine with the windows known without asking any server, so an unknown context.engine or
    a far too small summary model (R-C9) stops start-up with one line before any request is sent."""
    window, summary_window = await resolve_windows(settings, probe=False, announce=False)
    provider = main_provider_for(settings)
    summary = summary_provider_for(settings, provider)
    try:
        engine_factory(settings, provider, summary, window, summary_window)
    finally:
        await provider.aclose()
        await summary.aclose()


def engine_factory(settings: Settings, provider: Provider, summary: Provider, window: ServedWindow,
                   summary_window: ServedWindow) -> Callable[[], ContextEngine]:
    """What builds each new session's context engine (one is built now, as a check)."""
    llm, comp = settings.llm, settings.compression
    factory = resolve_engine_factory(settings.context.engine)

    def build() -> ContextEngine:
        # Read at every build: a window learned meanwhile (an overflow error) applies to new sessions too.
        return factory(
            context_length=window.tokens, threshold=comp.threshold, target_ratio=comp.target_ratio,
            protect_first_n=comp.protect_first_n, protect_last_n=comp.protect_last_n,
            max_tokens=llm.max_tokens, reserve_output=True, summary_provider=summary,
            main_provider=provider, summary_context_length=summary_window.tokens, summary_window=summary_window,
            abort_on_summary_failure=comp.abort_on_summary_failure, encoding=llm.encoding,
            provider_name=llm.provider, model=llm.model, autoraise=comp.autoraise,
            summary_deadline_seconds=summary_deadline_seconds(settings),
        )

    # Build one engine now, so an unknown context.engine or a far too small summary model (R-C9) stops
    # start-up with a clear message instead of failing on the first message of every chat.
    build()
    return build
