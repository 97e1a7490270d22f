"""Fixtures for the compression tests: the fake LLM server fixture and a fixed clock/date."""

from __future__ import annotations

from tests.fakes.llm_fixture import fake_llm  # noqa: F401
