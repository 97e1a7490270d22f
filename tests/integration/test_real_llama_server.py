"""The providers and the compressor against a REAL OpenAI-compatible server: llama.cpp with SmolLM2-135M.

Fakes reproduce what providers say; this checks it against one: usage, streaming usage, the overflow error's
real shape, and a compression whose summary comes from a real model. The model is far too small to judge
summary content, so only behaviour is asserted. Needs the `xllamacpp` wheel (dev extras) and the model file
(`tests/integration/model_file.py`, which `make test` runs); skipped without them unless
CONCORD_REQUIRE_SERVICES is set.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.compression.compressor import ContextCompressor
from agent.llm.errors import ContextOverflow
from agent.llm.openai_compat import OpenAICompatProvider
from agent.llm.window_probe import probe_served_window
from tests.integration.model_file import find_model

N_CTX = 2048
SERVER = Path(__file__).with_name("llama_server.py")


def _model_path() -> Path:
    model = find_model()
    missing = []
    if importlib.util.find_spec("xllamacpp") is None:
        missing.append("the xllamacpp wheel (dev extras)")
    if model is None:
        missing.append("the model file (python tests/integration/model_file.py)")
    if missing:
        message = f"real llama.cpp server needs {' and '.join(missing)}"
        if os.environ.get("CONCORD_REQUIRE_SERVICES", "") not in ("", "0", "false"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    assert model is not None
    return model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    """A llama.cpp server on a free loopback port for this module; stopped by its PID."""
    model, port = _model_path(), _free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), str(model), str(port), str(N_CTX)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("llama.cpp server did not come up", pytrace=False)
            time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def _provider(url: str) -> OpenAICompatProvider:
    return OpenAICompatProvider(url, None, "smollm2", name="llamacpp", timeout=120)


async def test_usage_is_reported_plain_and_streaming(llama_url: str) -> None:
    provider = _provider(llama_url)
    try:
        plain = await provider.complete([{"role": "user", "content": "Say hi."}], max_tokens=8)
        streamed = await provider.complete([{"role": "user", "content": "Say hi."}], max_tokens=8, stream=True)
    finally:
        await provider.aclose()
    for completion in (plain, streamed):
        assert completion.usage.prompt_tokens > 5 and 0 < completion.usage.completion_tokens <= 8
        assert completion.finish_reason in ("stop", "length")


async def test_a_prompt_over_the_window_is_a_context_overflow_with_the_stated_limit(llama_url: str) -> None:
    provider = _provider(llama_url)
    try:
        with pytest.raises(ContextOverflow) as info:
            await provider.complete([{"role": "user", "content": "word " * 3_000}], max_tokens=8)
    finally:
        await provider.aclose()
    assert info.value.limit == N_CTX


async def test_a_real_model_summary_compresses_a_conversation(llama_url: str) -> None:
    provider = _provider(llama_url)
    facts = ["the staging database listens on port 54329", "deploys happen on Tuesdays",
             "backups run at 02:00 UTC", "the cache TTL is 15 minutes"]
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(16):
        messages.append({"role": "user", "content": f"Note {i}: remember that {facts[i % 4]}, rollout step {i}."})
        messages.append({"role": "assistant", "content": f"Noted: {facts[i % 4]} (step {i}). " + " ".join(
            f"Step {i} checks item {j} of the rollout list before moving on." for j in range(6))})
    compressor = ContextCompressor(context_length=N_CTX, max_tokens=128, summary_provider=provider)
    try:
        result = await compressor.compress(messages, force=True)
    finally:
        await provider.aclose()
    assert result.compressed and not result.aborted
    assert result.summary_kind in ("llm", "static")  # static when the tiny model's summary did not shrink it
    assert result.tokens_after < result.tokens_before
    assert result.messages[0] == {**messages[0], "content": result.messages[0]["content"]}
    assert result.messages[-1] == messages[-1] and result.messages[-2] == messages[-2]


async def test_the_window_the_server_really_serves_is_found(llama_url: str) -> None:
    # The model's GGUF says 8,192 (n_ctx_train); the server serves --ctx-size, and says so.
    report = await probe_served_window(llama_url, "any-name")
    assert report is not None and report.tokens == N_CTX


async def test_the_gateway_starts_with_the_window_the_server_serves(llama_url: str, tmp_path: Path) -> None:
    # No llm.context_length and a model name no table knows: without asking, Concord would assume 128,000.
    from gateway.app.runtime_parts import build_runtime
    from gateway.config import load_settings

    settings = load_settings(llm={"base_url": llama_url, "model": "local"}, storage={"data_dir": str(tmp_path)},
                             gateway={"sweep_cron": None})
    runtime = await build_runtime(settings)
    try:
        assert runtime.window is not None and runtime.window.tokens == N_CTX
        assert runtime.window.source.startswith("reported by the server (llama.cpp")
        engine = runtime.new_engine()
        assert (engine.context_length, engine.threshold_tokens) == (N_CTX, 1_305)
    finally:
        await runtime.provider.aclose()
        await runtime.store.aclose()
