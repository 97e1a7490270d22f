"""Fixtures for the agent tests: the loopback fake LLM server (``fake_llm``)."""

from tests.fakes.llm_fixture import fake_llm  # noqa: F401 - re-exported pytest fixture
