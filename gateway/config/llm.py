"""The agent's side of the settings: the main model (``llm``), side models (``auxiliary``), what tokens cost
(``pricing``), the context engine (``context``), the compressor (``compression``), prompt caching and memory."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

from gateway.config.fallbacks import MAX_FALLBACKS, FallbackModel, check_model_names
from gateway.config.fields import MAX_CONTEXT_LENGTH, SECTION


class LLMSettings(BaseModel):
    """The main model the agent talks to."""

    model_config = SECTION
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = ""
    # The model's window. Unset: what its server reports, else learned from the server, else the model table;
    # set: the smaller of this and the server's report (`agent.llm.window`).
    context_length: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
    max_tokens: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base"
    max_iterations: int = Field(default=20, ge=1, le=200)
    # None: the provider's default. Sent with every agent call (summaries keep their own settings).
    temperature: float | None = Field(default=None, ge=0, le=2)
    # Tried in order when the main model fails over (gateway/config/fallbacks.py); a failed model is skipped
    # for fallback_cooldown_seconds.
    fallbacks: list[FallbackModel] = Field(default=[], max_length=MAX_FALLBACKS)
    fallback_cooldown_seconds: float = Field(default=60.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _fallback_names(self) -> LLMSettings:
        check_model_names(self.model, self.fallbacks)
        return self

    @property
    def configured(self) -> bool:
        """Whether enough is set to talk to a model (a model name and somewhere to send it)."""
        return bool(self.model and (self.base_url or self.api_key))


class CompressionSettings(BaseModel):
    """The agent's own compressor (R-T4…R-T6, R-C*)."""

    model_config = SECTION
    enabled: bool = True
    threshold: float = Field(default=0.50, gt=0, le=1)
    target_ratio: float = Field(default=0.20, gt=0, lt=1)
    protect_first_n: int = Field(default=3, ge=0, le=1000)
    protect_last_n: int = Field(default=20, ge=1, le=10_000)
    in_place: bool = True
    abort_on_summary_failure: bool = False
    autoraise: bool = True
    # Compact in the background, after an answer was sent, once past the soft mark (`agent.compression.pacing`).
    ahead_of_need: bool = True


class AuxiliaryModel(BaseModel):
    """A side model; every unset field falls back to the main model's."""

    model_config = SECTION
    provider: Literal["openai", "anthropic"] | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    context_length: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
    # Overall deadline of one summary request; unset: llm.timeout_seconds. A compaction waits at most twice
    # this for its summary (provider retries and the fallback to the main model included).
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)


class AuxiliarySettings(BaseModel):
    """Auxiliary models by job."""

    model_config = SECTION
    compression: AuxiliaryModel = AuxiliaryModel()


class ContextSettings(BaseModel):
    """Which context engine runs (R-E2)."""

    model_config = SECTION
    engine: str = Field(default="compressor", min_length=1)


class PromptCachingSettings(BaseModel):
    """Anthropic-style cache_control markers (R-K1, R-K2)."""

    model_config = SECTION
    enabled: bool = True
    cache_ttl: Literal["5m", "1h"] = "5m"



class MemorySettings(BaseModel):
    """Built-in file memory (MEMORY.md per bot, USER.md per user)."""

    model_config = SECTION
    enabled: bool = True
    directory: Path | None = None



class PricingSettings(BaseModel):
    """What the model's tokens cost, in US dollars per million; with ``input`` and ``output`` set, /usage and
    /stats show costs (summary calls priced like the agent's). Cache reads and writes cost ``input`` unless set."""

    model_config = SECTION
    input: float | None = Field(default=None, ge=0, le=100_000)
    output: float | None = Field(default=None, ge=0, le=100_000)
    cache_read: float | None = Field(default=None, ge=0, le=100_000)
    cache_write: float | None = Field(default=None, ge=0, le=100_000)

    @property
    def configured(self) -> bool:
        """Whether costs can be told (``input`` and ``output`` are set)."""
        return self.input is not None and self.output is not None
