"""``python -m bench.windows``: its loopback servers behave like vLLM and Ollama, and a short replay measures."""

from __future__ import annotations

import httpx
import pytest

from bench import windows
from bench._window_server import Call, WindowServer

LINES = [f"Caroline: line {i} of the conversation, about the trip to the lake and what we packed" for i in range(40)]


async def test_the_servers_refuse_or_truncate_what_does_not_fit_and_say_their_window_their_own_way() -> None:
    vllm, ollama = await WindowServer(1_000, "enforce").start(), await WindowServer(1_000, "truncate").start()
    body = {"model": "local", "max_tokens": 200, "messages": [
        {"role": "system", "content": "be brief"}, *({"role": "user", "content": "word " * 300} for _ in range(5))]}
    try:
        async with httpx.AsyncClient() as client:
            models = (await client.get(f"{vllm.base_url}/models")).json()
            refused = await client.post(f"{vllm.base_url}/chat/completions", json=body)
            assert (await client.get(f"http://127.0.0.1:{ollama.port}/api/ps")).json() == {"models": []}
            cut = (await client.post(f"{ollama.base_url}/chat/completions", json=body)).json()
            loaded = (await client.get(f"http://127.0.0.1:{ollama.port}/api/ps")).json()
    finally:
        await vllm.stop()
        await ollama.stop()
    assert models["data"][0]["max_model_len"] == 1_000
    assert refused.status_code == 400 and "maximum context length is 1000 tokens" in refused.json()["message"]
    assert loaded["models"][0]["context_length"] == 1_000
    [truncated] = ollama.calls
    assert truncated.over and truncated.outcome == "truncated" and truncated.kept_tokens <= 800
    assert cut["usage"]["prompt_tokens"] == truncated.kept_tokens < truncated.prompt_tokens


@pytest.mark.parametrize("mode", ["enforce", "truncate"])
async def test_a_short_replay_at_4096_tokens_stays_inside_the_window(mode: str) -> None:
    figures = await windows.replay(LINES, 4_096, mode)
    assert figures.answered == len(LINES) and figures.over == 0
    assert figures.cut_silently == 0 and figures.live_clipped == 0
    assert "4,096 tokens, reported by the server" in figures.found


def test_main_prints_a_row_per_window_and_server(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "load_lines", lambda spec, limit: LINES[:limit])
    assert windows.main(["--lines", "10", "--windows", "4096", "--servers", "enforce"]) == 0
    out = capsys.readouterr().out
    assert "| 4,096 | enforce | on | 10/10 | 0 | 0 (0.0%) |" in out


def test_a_turn_waited_only_for_a_summary_that_ended_between_its_line_and_its_request() -> None:
    def call(kind: str, line: int, started: float, ended: float) -> Call:
        return Call(kind, line, 100, 10, False, "ok", started=started, ended=ended)

    calls = [call("chat", 0, 0.1, 0.2),
             call("summary", 0, 0.5, 5.5),  # ahead of need, after line 0's answer
             call("chat", 1, 1.1, 1.2),  # line 1 (sent at 1.0) answered beside it: no wait
             call("summary", 2, 2.1, 4.0), call("chat", 2, 4.1, 4.2),  # line 2 waited for its own summary
             call("chat", 3, 9.0, 9.1)]  # line 3 sent after both ended
    assert windows.waited_turns(calls, [0.0, 1.0, 2.0, 8.0]) == 1
