"""CLI tests: the fake LLM server for `concord run` subprocesses."""

from tests.fakes.llm_fixture import fake_llm  # noqa: F401
