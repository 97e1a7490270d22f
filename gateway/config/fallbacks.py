"""``llm.fallbacks``: the models tried, in order, when the main one fails with a class another model can cure.

In an environment variable the list is JSON (``CONCORD_LLM__FALLBACKS='[{"model": "…", "base_url": "…"}]'``);
in config.yaml a list of mappings. Unset fields fall back to ``llm.*`` as the summary model's do
(`agent.llm.models.resolve_auxiliary`): the main key is only sent to the main endpoint.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from gateway.config.fields import SECTION

__all__ = ["MAX_FALLBACKS", "FallbackModel", "check_model_names"]

# A chain longer than this would keep a chat waiting through that many failures before an answer.
MAX_FALLBACKS = 8
_NAME = r"^\S{1,100}$"


class FallbackModel(BaseModel):
    """One fallback model, with its own endpoint, key and window."""

    model_config = SECTION
    model: str = Field(min_length=1, max_length=200)
    # How /model, /status and the notices name it; unset: the model name. Needed when two entries share one.
    name: str | None = Field(default=None, pattern=_NAME)
    provider: Literal["openai", "anthropic"] | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    context_length: int | None = Field(default=None, gt=0, le=100_000_000)
    max_tokens: int | None = Field(default=None, gt=0, le=100_000_000)
    # Request deadline; unset: llm.timeout_seconds.
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)

    @property
    def label(self) -> str:
        """The name it goes by."""
        return self.name or self.model


def check_model_names(main: str, fallbacks: list[FallbackModel]) -> None:
    """Raise ValueError unless the main model and every fallback go by different names."""
    seen = {main}
    for fallback in fallbacks:
        if fallback.label in seen:
            raise ValueError(f"llm.fallbacks: the name {fallback.label!r} is used twice (give the entry its own "
                             "`name`)")
        seen.add(fallback.label)
