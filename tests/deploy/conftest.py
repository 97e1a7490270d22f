"""Deploy tests: the fake LLM server for runs of Concord the way deploy/ starts it."""

from tests.fakes.llm_fixture import fake_llm  # noqa: F401
