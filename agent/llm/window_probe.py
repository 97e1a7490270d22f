"""Ask an OpenAI-compatible server which context window it really serves a model with.

A model's nominal window (its GGUF metadata, a vendor's table) is not what a local server gives it: llama.cpp
serves ``--ctx-size`` (per slot), Ollama serves ``num_ctx`` (4,096 by default on small GPUs) and LM Studio the
length the model was loaded with. Where a server can say, it is asked, in this order:

    GET  {base}/models            vLLM ``data[].max_model_len``; llama.cpp ``data[].meta.n_ctx``; routers that
                                  list ``data[].context_length`` (OpenRouter)
    GET  {root}/props             llama.cpp ``default_generation_settings.n_ctx`` (the slot's window), or ``n_ctx``
    GET  {root}/api/v0/models     LM Studio ``data[].loaded_context_length`` of the loaded model
    GET  {root}/api/ps            Ollama ``models[].context_length`` of the loaded model; when it is not loaded,
    POST {root}/api/show          its Modelfile's ``num_ctx``, else the model is loaded (``POST /api/generate``
                                  without a prompt, which Ollama documents as loading it) and ``/api/ps`` asked again

``{root}`` is the base URL without its ``/v1``. Never used: ``n_ctx_train``, LM Studio's ``max_context_length``
and Ollama's ``model_info["<arch>.context_length"]`` — the window the model was trained for, not the one it is
served with (the classic Ollama trap: the GGUF says 131,072, the server truncates at 4,096). Hosted APIs are
asked only ``/models``; the model table covers them. Every failure (refused, 404, a body of another shape)
means "this server does not say", never an error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["PROBE_TIMEOUT_S", "WindowReport", "probe_served_window"]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
# Loading a model into memory can take a while; it happens once, at start-up, and the first message would
# wait for it anyway.
OLLAMA_LOAD_TIMEOUT_S = 120.0
_HOSTED = ("api.openai.com", "openrouter.ai", "api.anthropic.com", "api.groq.com", "api.deepseek.com",
           "api.mistral.ai", "api.together.xyz", "api.fireworks.ai", "generativelanguage.googleapis.com",
           "api.x.ai")
# "num_ctx" first on a line, maybe after blank lines. Tried only where a run of whitespace starts (the text's start,
# or after a non-blank), the match starts there rather than at the run's first line start; the number is the same.
# Tried at every line start, each read the rest of a run of blank lines: 2.4 s for 32,000 newlines.
_NUM_CTX = re.compile(r"(?:\A|(?<=\S)[^\S\n]*+\n)\s*+num_ctx\s+(\d+)\s*$", re.M)


@dataclass(frozen=True, slots=True)
class WindowReport:
    """A window a server reported, and where it said so (``"llama.cpp /props"``)."""

    tokens: int
    source: str


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _is_hosted(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return any(host == h or host.endswith("." + h) for h in _HOSTED)


def _names(model: str) -> set[str]:
    """The names a server may list ``model`` under (Ollama adds ``:latest`` to an untagged name)."""
    names = {model}
    if model and ":" not in model.rsplit("/", 1)[-1]:
        names.add(f"{model}:latest")
    return names


def _entry(entries: Any, model: str, *keys: str) -> Mapping[str, Any] | None:
    """The entry of ``entries`` naming ``model`` under one of ``keys``; the only entry when there is one (a
    single-model server answers whatever model name it is asked for)."""
    if not isinstance(entries, list):
        return None
    usable = [e for e in entries if isinstance(e, Mapping)]
    names = _names(model)
    for entry in usable:
        aliases = entry.get("aliases") if isinstance(entry.get("aliases"), list) else []
        if any(entry.get(k) in names for k in keys) or names & {str(a) for a in aliases}:
            return entry
    return usable[0] if len(usable) == 1 else None


class _Unreachable(Exception):
    """The server does not answer at all: asking it anything else would only wait again."""


async def _get_json(client: httpx.AsyncClient, url: str, **kwargs: Any) -> Any:
    try:
        response = await (client.post(url, **kwargs) if "json" in kwargs else client.get(url, **kwargs))
    except (httpx.TransportError, OSError) as exc:
        raise _Unreachable from exc
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


async def _openai_models(client: httpx.AsyncClient, base: str, model: str) -> WindowReport | None:
    data = await _get_json(client, f"{base}/models")
    entry = _entry(data.get("data") if isinstance(data, Mapping) else None, model, "id")
    if entry is None:
        return None
    if tokens := _positive(entry.get("max_model_len")):
        return WindowReport(tokens, "vLLM /v1/models max_model_len")
    meta = entry.get("meta")
    if isinstance(meta, Mapping) and (tokens := _positive(meta.get("n_ctx"))):
        return WindowReport(tokens, "llama.cpp /v1/models n_ctx")
    if tokens := _positive(entry.get("context_length")):
        return WindowReport(tokens, "/v1/models context_length")
    return None


async def _llamacpp_props(client: httpx.AsyncClient, root: str) -> WindowReport | None:
    data = await _get_json(client, f"{root}/props")
    if not isinstance(data, Mapping):
        return None
    settings = data.get("default_generation_settings")
    tokens = _positive(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    tokens = tokens or _positive(data.get("n_ctx"))
    return WindowReport(tokens, "llama.cpp /props") if tokens else None


async def _lmstudio(client: httpx.AsyncClient, root: str, model: str) -> WindowReport | None:
    data = await _get_json(client, f"{root}/api/v0/models")
    entries = data.get("data") if isinstance(data, Mapping) else None
    loaded = [e for e in entries or () if isinstance(e, Mapping) and e.get("state") == "loaded"]
    entry = _entry(loaded, model, "id")
    tokens = _positive(entry.get("loaded_context_length")) if entry is not None else None
    return WindowReport(tokens, "LM Studio /api/v0/models") if tokens else None


async def _ollama_ps(client: httpx.AsyncClient, root: str, model: str) -> tuple[bool, WindowReport | None]:
    """(whether this is an Ollama server, the loaded model's window)."""
    data = await _get_json(client, f"{root}/api/ps")
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), list):
        return False, None
    names = _names(model)
    for entry in data["models"]:
        if isinstance(entry, Mapping) and (entry.get("name") in names or entry.get("model") in names):
            tokens = _positive(entry.get("context_length"))
            return True, WindowReport(tokens, "Ollama /api/ps") if tokens else None
    return True, None


async def _ollama(client: httpx.AsyncClient, root: str, model: str, load: bool) -> WindowReport | None:
    is_ollama, report = await _ollama_ps(client, root, model)
    if not is_ollama or report is not None:
        return report
    shown = await _get_json(client, f"{root}/api/show", json={"model": model})
    parameters = shown.get("parameters") if isinstance(shown, Mapping) else None
    if isinstance(parameters, str) and (match := _NUM_CTX.search(parameters)):
        return WindowReport(int(match.group(1)), "Ollama num_ctx of the model")
    if not load:
        return None
    log.info("asking Ollama to load %s to learn the window it serves it with", model)
    await _get_json(client, f"{root}/api/generate", json={"model": model}, timeout=OLLAMA_LOAD_TIMEOUT_S)
    return (await _ollama_ps(client, root, model))[1]


async def probe_served_window(base_url: str, model: str, *, api_key: str | None = None,
                              client: httpx.AsyncClient | None = None, request_timeout_s: float = PROBE_TIMEOUT_S,
                              load_ollama_model: bool = True) -> WindowReport | None:
    """The window ``model`` is served with at ``base_url`` (an OpenAI-compatible base, usually ending in
    ``/v1``), or None when the server does not say. Never raises for an unreachable or silent server."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    owned = client is None
    client = client or httpx.AsyncClient(timeout=httpx.Timeout(request_timeout_s, connect=min(2.0, request_timeout_s)),
                                         headers=headers)
    base = base_url.rstrip("/")
    try:
        report = await _openai_models(client, base, model)
        if report is not None or _is_hosted(base):
            return report
        root = _root(base)
        return (await _llamacpp_props(client, root) or await _lmstudio(client, root, model)
                or await _ollama(client, root, model, load_ollama_model))
    except _Unreachable:
        log.info("the LLM server at %s did not answer the window probe", base)
        return None
    finally:
        if owned:
            await client.aclose()
