"""One overall deadline per request: a reply that trickles in (never idle long enough for a read timeout) ends
at the deadline with `DeadlineExceeded`, is not repeated, and the next request works."""

from __future__ import annotations

import time

import pytest

from agent.jsonlimits import TooDeep, json_depth, loads_bounded
from agent.llm.errors import BadResponse, DeadlineExceeded, LLMTimeout
from agent.tokens import get_counter
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

USER = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_trickling_reply_ends_at_the_deadline_and_is_not_repeated(
    fake_llm: FakeLLMServer, make_provider: MakeProvider, api: str, stream: bool
) -> None:
    get_counter()  # the fake counts tokens before answering: load the tokenizer outside the deadline
    fake_llm.reply("word " * 400, trickle=0.4, chunk_delay=0.4, text_pieces=20)
    fake_llm.reply("on time")
    provider = make_provider(api, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="still arriving after 1 s") as caught:
        await provider.complete(USER, stream=stream)
    assert time.monotonic() - started < 2.5
    assert not caught.value.retryable and isinstance(caught.value, LLMTimeout)
    assert len(fake_llm.requests) == 1
    assert (await provider.complete(USER, stream=stream)).text == "on time"


async def test_a_reply_deeper_than_the_limit_is_a_bad_response(fake_llm: FakeLLMServer,
                                                                 make_provider: MakeProvider) -> None:
    fake_llm.raw(200, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadResponse, match="not valid JSON"):
        await make_provider("openai").complete(USER)


def test_loads_bounded_limits_depth_without_recursing() -> None:
    assert loads_bounded('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    assert json_depth({"a": [1, {"b": 2}]}) == 3 and json_depth(5) == 0
    for deep in ("[" * 100_000 + "]" * 100_000, "[" * 500 + "]" * 500):
        with pytest.raises(TooDeep):
            loads_bounded(deep)
    with pytest.raises(ValueError):
        loads_bounded("not json")


def test_loads_bounded_counts_brackets_only_as_a_shortcut() -> None:
    # Just past the limit is refused, exactly at it accepted (the bracket count decides nothing alone).
    limit = 64
    with pytest.raises(TooDeep):
        loads_bounded("[" * (limit + 1) + "]" * (limit + 1), max_depth=limit)
    assert json_depth(loads_bounded("[" * limit + "]" * limit, max_depth=limit)) == limit
    # Many brackets inside strings or side by side are not depth: shallow JSON parses.
    wide = "[" + ",".join(["[]"] * 500) + "]"
    assert len(loads_bounded(wide, max_depth=limit)) == 500
    assert loads_bounded(b'{"text": "' + b"[{" * 300 + b'"}', max_depth=limit) == {"text": "[{" * 300}
