"""Asking a server which window it serves: each server's real response shapes, on a real loopback server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from agent.llm.window_probe import probe_served_window
from tests.fakes.loopback import serve_on_loopback

Routes = dict[tuple[str, str], Callable[[dict[str, Any]], Any]]


class WindowServer:
    """Answers the given (method, path) routes with JSON; everything else 404, and records every request."""

    def __init__(self) -> None:
        self.routes: Routes = {}
        self.seen: list[tuple[str, str, Any]] = []
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.seen.append((request.method, request.path, body))
        answer = self.routes.get((request.method, request.path))
        if answer is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(answer(body))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
async def server() -> AsyncIterator[WindowServer]:
    fake = WindowServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake._handle)
    runner, fake.port = await serve_on_loopback(app)
    try:
        yield fake
    finally:
        await runner.cleanup()


async def test_vllm_models_max_model_len(server: WindowServer) -> None:
    server.routes[("GET", "/v1/models")] = lambda _: {"object": "list", "data": [
        {"id": "other", "object": "model", "max_model_len": 32_768},
        {"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen2.5-7B-Instruct",
         "parent": None, "max_model_len": 8_192, "permission": []}]}
    report = await probe_served_window(server.base, "Qwen/Qwen2.5-7B-Instruct")
    assert report is not None and (report.tokens, report.source) == (8_192, "vLLM /v1/models max_model_len")


async def test_llamacpp_props_when_models_has_no_window(server: WindowServer) -> None:
    # An older llama.cpp: /v1/models without meta.n_ctx (n_ctx_train is the training window, never used).
    server.routes[("GET", "/v1/models")] = lambda _: {"object": "list", "data": [
        {"id": "model.gguf", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx_train": 131_072}}]}
    server.routes[("GET", "/props")] = lambda _: {"default_generation_settings": {"n_ctx": 4_096, "n_predict": -1},
                                                  "total_slots": 1, "model_path": "model.gguf"}
    report = await probe_served_window(server.base, "local")
    assert report is not None and (report.tokens, report.source) == (4_096, "llama.cpp /props")


async def test_newer_llamacpp_says_it_in_models_meta(server: WindowServer) -> None:
    server.routes[("GET", "/v1/models")] = lambda _: {"object": "list", "data": [
        {"id": "/models/smollm2.gguf", "owned_by": "llamacpp", "meta": {"n_ctx": 2_048, "n_ctx_train": 8_192}}]}
    report = await probe_served_window(server.base, "local")  # one model served: any name reaches it
    assert report is not None and report.tokens == 2_048


async def test_lmstudio_loaded_context_length_not_max(server: WindowServer) -> None:
    server.routes[("GET", "/api/v0/models")] = lambda _: {"object": "list", "data": [
        {"id": "qwen2-vl-7b-instruct", "state": "not-loaded", "max_context_length": 32_768},
        {"id": "meta-llama-3.1-8b-instruct", "type": "llm", "state": "loaded", "max_context_length": 131_072,
         "loaded_context_length": 8_192}]}
    report = await probe_served_window(server.base, "meta-llama-3.1-8b-instruct")
    assert report is not None and (report.tokens, report.source) == (8_192, "LM Studio /api/v0/models")


def _ollama_show(parameters: str) -> Callable[[Any], Any]:
    # model_info holds the GGUF's training window: never the served one.
    return lambda _: {"parameters": parameters, "model_info": {"general.architecture": "qwen2",
                                                               "qwen2.context_length": 131_072}}


async def test_ollama_loaded_model_from_api_ps(server: WindowServer) -> None:
    server.routes[("GET", "/v1/models")] = lambda _: {"object": "list", "data": [
        {"id": "qwen2.5:latest", "object": "model", "owned_by": "library"}]}
    server.routes[("GET", "/api/ps")] = lambda _: {"models": [
        {"name": "qwen2.5:latest", "model": "qwen2.5:latest", "size": 6_591_830_464, "size_vram": 5_333_539_264,
         "expires_at": "2025-10-17T16:47:07.93355-07:00", "context_length": 4_096}]}
    server.routes[("POST", "/api/show")] = _ollama_show("stop \"<|im_end|>\"")
    report = await probe_served_window(server.base, "qwen2.5")
    assert report is not None and (report.tokens, report.source) == (4_096, "Ollama /api/ps")


async def test_ollama_model_not_loaded_uses_its_num_ctx(server: WindowServer) -> None:
    server.routes[("GET", "/api/ps")] = lambda _: {"models": []}
    server.routes[("POST", "/api/show")] = _ollama_show('num_ctx                        16384\nstop "<|im_end|>"')
    report = await probe_served_window(server.base, "qwen2.5")
    assert report is not None and (report.tokens, report.source) == (16_384, "Ollama num_ctx of the model")
    assert ("POST", "/api/generate", {"model": "qwen2.5"}) not in server.seen


async def test_ollama_model_not_loaded_without_num_ctx_is_loaded_then_asked(server: WindowServer) -> None:
    loaded: list[dict[str, Any]] = []
    server.routes[("GET", "/api/ps")] = lambda _: {"models": loaded}
    server.routes[("POST", "/api/show")] = _ollama_show('stop "<|im_end|>"')

    def generate(body: Any) -> Any:
        loaded.append({"name": "qwen2.5:latest", "model": "qwen2.5:latest", "context_length": 4_096})
        return {"model": "qwen2.5", "response": "", "done": True, "done_reason": "load"}

    server.routes[("POST", "/api/generate")] = generate
    report = await probe_served_window(server.base, "qwen2.5")
    assert report is not None and report.tokens == 4_096
    assert ("POST", "/api/generate", {"model": "qwen2.5"}) in server.seen
    assert await probe_served_window(server.base, "qwen2.5", load_ollama_model=False) is not None


async def test_the_training_window_alone_is_never_reported(server: WindowServer) -> None:
    server.routes[("GET", "/api/ps")] = lambda _: {"models": []}
    server.routes[("POST", "/api/show")] = _ollama_show('stop "<|im_end|>"')
    assert await probe_served_window(server.base, "qwen2.5", load_ollama_model=False) is None


async def test_a_server_that_does_not_say_gives_none(server: WindowServer) -> None:
    server.routes[("GET", "/v1/models")] = lambda _: {"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]}
    assert await probe_served_window(server.base, "gpt-4o") is None
    assert [path for _, path, _ in server.seen] == ["/v1/models", "/props", "/api/v0/models", "/api/ps"]


async def test_an_unreachable_server_is_given_up_at_once() -> None:
    started = time.monotonic()
    assert await probe_served_window("http://127.0.0.1:9/v1", "local") is None
    assert time.monotonic() - started < 2


async def test_hosted_apis_are_only_asked_their_model_list(server: WindowServer) -> None:
    # Reached through a client whose requests go to the loopback fake, whatever host the URL names.
    import httpx

    transport = httpx.AsyncHTTPTransport()

    class ToLoopback(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=server.port)
            return await transport.handle_async_request(request)

    async with httpx.AsyncClient(transport=ToLoopback()) as client:
        assert await probe_served_window("https://api.openai.com/v1", "gpt-4o", client=client) is None
    assert [path for _, path, _ in server.seen] == ["/v1/models"]
