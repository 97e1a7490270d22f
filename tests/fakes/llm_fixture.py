"""The ``fake_llm`` pytest fixture: a started `FakeLLMServer`, stopped after the test.

Import it into a test directory's conftest.py: ``from tests.fakes.llm_fixture import fake_llm  # noqa: F401``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm_server import FakeLLMServer

__all__ = ["fake_llm"]


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    """A fake OpenAI + Anthropic server on 127.0.0.1 (random port), empty script, default reply "ok"."""
    server = await FakeLLMServer().start()
    try:
        yield server
    finally:
        await server.stop()
