"""Failover between configured models, over real HTTP to two fake LLM servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agent.llm import AuthError, ContextOverflow, ServerError
from agent.llm.base import Completion
from agent.llm.failover import ChatFailover, FailoverProvider, ModelRoute, Rerouted
from agent.llm.openai_compat import OpenAICompatProvider
from tests.fakes.llm_server import FakeLLMServer

ASK = [{"role": "user", "content": "hello"}]


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeLLMServer, FakeLLMServer]]:
    async with FakeLLMServer() as main, FakeLLMServer() as backup:
        main.default_text, backup.default_text = "from main", "from backup"
        yield main, backup


@pytest.fixture
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def chain(servers: tuple[FakeLLMServer, FakeLLMServer], client: httpx.AsyncClient, clock: Clock,
          cooldown: float = 30.0) -> FailoverProvider:
    main, backup = servers
    routes = [ModelRoute("big", OpenAICompatProvider(main.openai_base_url, None, "big-model", client=client,
                                                     max_retries=0), 200_000),
              ModelRoute("small", OpenAICompatProvider(backup.openai_base_url, None, "small-model", client=client,
                                                       max_retries=0), 16_000, 1_000)]
    return FailoverProvider(routes, cooldown_seconds=cooldown, clock=clock)


async def test_a_failing_main_model_is_replaced_then_skipped_until_its_cooldown_ends(
        servers: tuple[FakeLLMServer, FakeLLMServer], http_client: httpx.AsyncClient) -> None:
    main, backup = servers
    clock = Clock()
    models = chain(servers, http_client, clock)
    main.raw(503, '{"error": {"message": "upstream unavailable", "type": "server_error"}}')

    first = await models.complete(ASK)
    assert first.text == "from backup" and first.model == "small-model"
    assert len(main.requests) == 1 and len(backup.requests) == 1
    # The request the backup got is the same one, naming its own model.
    assert backup.last_request.json["model"] == "small-model"
    assert backup.last_request.messages == main.last_request.messages
    assert models.planned().model == "small" and models.planned().context_length == 16_000

    clock.now += 29
    assert (await models.complete(ASK)).text == "from backup"
    assert len(main.requests) == 1, "the main model is skipped while it cools down"

    clock.now += 2
    assert models.planned().model == "big"
    assert (await models.complete(ASK)).text == "from main"
    assert len(main.requests) == 2


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "overloaded", "bad_gateway", "model_not_found"])
async def test_every_retryable_class_fails_over(servers: tuple[FakeLLMServer, FakeLLMServer],
                                               http_client: httpx.AsyncClient, kind: str) -> None:
    main, _ = servers
    main.fail(kind)
    assert (await chain(servers, http_client, Clock()).complete(ASK)).text == "from backup"


async def test_an_unreachable_main_model_fails_over(servers: tuple[FakeLLMServer, FakeLLMServer],
                                                    http_client: httpx.AsyncClient) -> None:
    main, _ = servers
    models = chain(servers, http_client, Clock())
    await main.stop()  # connection refused
    assert (await models.complete(ASK)).text == "from backup"


@pytest.mark.parametrize(("kind", "error"), [("auth", AuthError), ("quota", AuthError),
                                             ("context_overflow", ContextOverflow)])
async def test_broken_setup_and_budget_errors_do_not_fail_over(
        servers: tuple[FakeLLMServer, FakeLLMServer], http_client: httpx.AsyncClient, kind: str,
        error: type[Exception]) -> None:
    main, backup = servers
    models = chain(servers, http_client, Clock())
    main.fail(kind)
    with pytest.raises(error):
        await models.complete(ASK)
    assert backup.requests == []
    assert models.planned().model == "big", "no cooldown: the next call goes to the main model again"


async def test_when_every_model_fails_the_preferred_ones_error_is_raised(
        servers: tuple[FakeLLMServer, FakeLLMServer], http_client: httpx.AsyncClient) -> None:
    main, backup = servers
    clock = Clock()
    models = chain(servers, http_client, clock)
    main.fail("server_error")
    backup.fail("rate_limit")
    with pytest.raises(ServerError):
        await models.complete(ASK)
    # Both cooling down: a call still tries them, in order, rather than refusing without a try.
    assert (await models.complete(ASK)).text == "from main"


async def ask(chat: ChatFailover) -> Completion:
    """A call as the agent loop makes it: moved on to a model with another window, it is sized again for it
    and made again (`Rerouted`)."""
    try:
        return await chat.complete(ASK)
    except Rerouted:
        return await chat.complete(ASK)


async def test_a_chat_says_once_per_episode_that_a_fallback_answered(
        servers: tuple[FakeLLMServer, FakeLLMServer], http_client: httpx.AsyncClient) -> None:
    main, _ = servers
    clock = Clock()
    models = chain(servers, http_client, clock)
    chat, other = models.for_chat(), models.for_chat()
    main.raw(503, '{"error": {"message": "down"}}')

    await ask(chat)
    notice = chat.take_notice()
    assert notice is not None and "small" in notice and "big" in notice and "30 s" in notice
    await ask(chat)
    assert chat.take_notice() is None, "once per episode"
    # Another chat skips the cooling model too, and is told as well: each conversation hears it once.
    assert (await ask(other)).text == "from backup"
    assert "cooling down" in (other.take_notice() or "")

    clock.now += 31
    assert (await ask(chat)).text == "from main"
    assert chat.take_notice() is None
    main.raw(503, '{"error": {"message": "down again"}}')
    await ask(chat)
    assert chat.take_notice() is not None, "a new episode is told again"


async def test_a_chat_prefers_its_own_model_and_fails_over_to_the_main_one(
        servers: tuple[FakeLLMServer, FakeLLMServer], http_client: httpx.AsyncClient) -> None:
    _, backup = servers
    models = chain(servers, http_client, Clock())
    chat = models.for_chat("small")
    assert (await ask(chat)).text == "from backup"
    assert chat.planned().context_length == 16_000 and chat.planned().max_tokens == 1_000
    assert chat.take_notice() is None
    backup.fail("server_error")
    assert (await ask(chat)).text == "from main"
    assert "Answered by big: small is failing" in (chat.take_notice() or "")
    assert models.for_chat("no-such-model").preferred.name == "big"


def test_model_names_must_be_unique() -> None:
    provider = OpenAICompatProvider("http://127.0.0.1:9/v1", None, "m")
    with pytest.raises(ValueError, match="unique"):
        FailoverProvider([ModelRoute("m", provider, 1000), ModelRoute("m", provider, 1000)])
