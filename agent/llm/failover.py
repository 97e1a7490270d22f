"""Model failover: the configured models as one provider, behind the provider seam.

`FailoverProvider` holds the main model and the ``llm.fallbacks`` in order (`ModelRoute`: a provider, its
window and output reserve). A call goes to the preferred model first; when that fails with a class that
another model can cure — rate-limited after the provider's own retries, 5xx, a network failure or timeout,
an unknown model — the model is put in a cooldown and the next one is tried. A model in its cooldown is
skipped until the cooldown ends (when every model is cooling down they are all tried, in order: a call is
never refused without one). Errors that mean a broken setup or a budget problem (auth and quota, context
overflow, payload and image limits, malformed requests) are raised at once: failing over would hide them.

Cooldowns are per process, on purpose: the state is one timestamp per model, a worker that has not seen the
failure spends at most one failed request (after its retries) to learn it, and sharing it through Redis would
add a round trip to every model call.

`ChatFailover` is one conversation's view of the chain: it prefers the chat's model (``/model``, else the
main one) and remembers which model answered last, so that the answer can say once per *fallback episode*
that another model answered (`take_notice`). It also tells the agent loop the window and output reserve of
the model its next call goes to (`planned`), so that budgets and compaction follow the model that answers.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.llm.base import Completion, ModelLimits, Provider, TextProgress
from agent.llm.errors import LLMError, LLMTimeout, ModelNotFound, NetworkError, RateLimited, ServerError
from agent.llm.window import ServedWindow

__all__ = ["FAILOVER_ERRORS", "ChatFailover", "Cooldowns", "FailoverProvider", "ModelRoute", "Rerouted"]

log = logging.getLogger(__name__)

# Failures another model can cure. LongContextTier, ContextOverflow, AuthError & co. are not among them.
FAILOVER_ERRORS: tuple[type[LLMError], ...] = (RateLimited, ServerError, NetworkError, LLMTimeout, ModelNotFound)
DEFAULT_COOLDOWN_SECONDS = 60.0

_WHY = {
    RateLimited: "is rate-limited",
    ServerError: "is failing",
    NetworkError: "cannot be reached",
    LLMTimeout: "is not answering in time",
    ModelNotFound: "does not offer the model",
}


@dataclass(frozen=True)
class ModelRoute:
    """One configured model: its name (as ``/model`` and notices show it), provider, window and output reserve."""

    name: str
    provider: Provider
    context_length: int
    max_tokens: int | None = None
    # The window its server really serves, as best known now (`agent.llm.window`); None: ``context_length``.
    window: ServedWindow | None = None

    @property
    def limits(self) -> ModelLimits:
        """The window and output reserve budgets must use while this model answers."""
        tokens = self.window.tokens if self.window is not None else self.context_length
        return ModelLimits(self.name, tokens, self.max_tokens, self.window)


class Cooldowns:
    """When each model may be tried again after a failure (monotonic clock, this process only)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds < 0:
            raise ValueError("the cooldown must be non-negative")
        self.seconds = seconds
        self._clock = clock
        self._until: dict[str, float] = {}

    def failed(self, name: str) -> None:
        """``name`` just failed: skip it for the cooldown."""
        self._until[name] = self._clock() + self.seconds

    def remaining(self, name: str) -> float:
        """Seconds until ``name`` is tried again (0 when it may be tried now)."""
        until = self._until.get(name)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._until[name]
            return 0.0
        return left


def _why(error: LLMError) -> str:
    for kind, text in _WHY.items():
        if isinstance(error, kind):
            return text
    return "failed"


class FailoverProvider(Provider):
    """The configured models as one provider; itself it prefers the main model (summaries, sweeps)."""

    def __init__(self, routes: Sequence[ModelRoute], *, cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not routes:
            raise ValueError("at least one model is needed")
        names = [r.name for r in routes]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        self.routes = tuple(routes)
        self.cooldowns = Cooldowns(cooldown_seconds, clock)
        # Hears every call a conversation begins (answered, failed or stopped): the gateway's /stats count.
        self.on_chat_call: Callable[[], None] | None = None
        self.name = self.main.provider.name
        self.model = self.main.provider.model

    def serve_windows(self, windows: Sequence[ServedWindow]) -> None:
        """Give the models, in order, the windows their servers really serve (before any chat uses them)."""
        self.routes = tuple(dataclasses.replace(route, window=window)
                            for route, window in zip(self.routes, windows, strict=False))

    @property
    def main(self) -> ModelRoute:
        """The main model (``llm.*``)."""
        return self.routes[0]

    def route(self, name: str | None) -> ModelRoute | None:
        """The model called ``name`` (None when no configured model has that name)."""
        return next((r for r in self.routes if r.name == name), None)

    def names(self) -> list[str]:
        """The configured models' names, main first."""
        return [r.name for r in self.routes]

    def for_chat(self, preferred: str | None = None) -> ChatFailover:
        """One conversation's view: ``preferred`` first (the main model when None or not configured)."""
        return ChatFailover(self, self.route(preferred) or self.main)

    def order(self, preferred: ModelRoute) -> list[ModelRoute]:
        """The models a call tries, in order: ``preferred``, then the others as configured, skipping those
        in their cooldown (all of them, in that order, when every one is cooling down)."""
        ranked = [preferred, *(r for r in self.routes if r is not preferred)]
        ready = [r for r in ranked if self.cooldowns.remaining(r.name) <= 0]
        return ready or ranked

    def planned(self) -> ModelLimits:
        """The limits of the model the next call of this provider goes to."""
        return self.order(self.main)[0].limits

    async def complete(self, messages: Sequence[Mapping[str, Any]], *, system: str | None = None,
                       tools: Sequence[Mapping[str, Any]] | None = None, max_tokens: int | None = None,
                       model: str | None = None, stream: bool = False, temperature: float | None = None,
                       on_text: TextProgress | None = None, cache: bool = True) -> Completion:
        """Complete with the main model first (``model`` is ignored: each model's provider names its own)."""
        completion, _, _ = await self.complete_via(self.main, messages, system=system, tools=tools,
                                                   max_tokens=max_tokens, stream=stream, temperature=temperature,
                                                   on_text=on_text, cache=cache)
        return completion

    async def complete_via(self, preferred: ModelRoute, messages: Sequence[Mapping[str, Any]], *,
                           system: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None,
                           max_tokens: int | None = None, stream: bool = False, temperature: float | None = None,
                           on_text: TextProgress | None = None, reroute: bool = False, cache: bool = True
                           ) -> tuple[Completion, ModelRoute, LLMError | None]:
        """Try the models in `order` until one answers; return its completion, the model that answered and
        the failure of ``preferred`` when another one answered in its place.

        A failure outside `FAILOVER_ERRORS` is raised as it is; when every model failed, the preferred
        model's failure is raised (the others are in the log). With ``reroute`` (the agent loop, which sized
        the request for the first model it goes to), a next model with other limits is not sent that request:
        `Rerouted` is raised instead, and the caller sizes the request for it (it is the one `planned` now
        names, the failed one being in its cooldown)."""
        first: LLMError | None = None
        candidates = self.order(preferred)
        for index, route in enumerate(candidates):
            if reroute and index > 0 and route.limits != candidates[0].limits:
                assert first is not None  # only a failure moves on to the next model
                raise Rerouted(route.name, first)
            try:
                completion = await route.provider.complete(
                    messages, system=system, tools=tools, max_tokens=max_tokens, stream=stream,
                    temperature=temperature, on_text=on_text, cache=cache)
            except FAILOVER_ERRORS as error:
                self.cooldowns.failed(route.name)
                first = first or error
                if len(self.routes) > 1:  # a lone model's failure is the caller's to report
                    following = candidates[index + 1] if index + 1 < len(candidates) else None
                    log.warning("model %s %s (%s: %s); %s; it is skipped for %.0f s while another answers",
                                route.name, _why(error), type(error).__name__, error.message,
                                f"trying {following.name}" if following else "no other model left",
                                self.cooldowns.seconds)
                continue
            if completion.model is None:
                completion = Completion(completion.message, completion.usage, completion.finish_reason,
                                        route.provider.model)
            failure = first if route is not preferred else None
            return completion, route, failure
        assert first is not None  # the loop ran at least once and every try failed
        raise first

    async def aclose(self) -> None:
        """Close every model's provider."""
        for route in self.routes:
            await route.provider.aclose()


class Rerouted(LLMError):
    """The call failed over to a model with another window or output reserve: size the request for it (the
    model `planned` names now) and call again. Not a failure of the conversation; ``failure`` is what the
    model before it raised."""

    def __init__(self, route: str, failure: LLMError) -> None:
        super().__init__(f"failed over to {route}, whose window differs", provider=route)
        self.failure = failure


class ChatFailover(Provider):
    """One conversation's view of a `FailoverProvider`: its preferred model, and the fallback episode.

    An episode starts when another model answers in the preferred one's place and ends when the preferred
    one answers again; `take_notice` hands out one notice per episode (and one more when the answering
    fallback changes within it)."""

    def __init__(self, chain: FailoverProvider, preferred: ModelRoute) -> None:
        self.chain = chain
        self.preferred = preferred
        self.name = preferred.provider.name
        self.model = preferred.provider.model
        self.answered_by: ModelRoute | None = None
        self._told: ModelRoute | None = None
        self._notice: str | None = None
        # What made the last call move on to another model, when the caller sized the request again for it.
        self._rerouted_by: LLMError | None = None

    def planned(self) -> ModelLimits:
        """The limits of the model this chat's next call goes to (the preferred one unless it is cooling down)."""
        return self.chain.order(self.preferred)[0].limits

    async def complete(self, messages: Sequence[Mapping[str, Any]], *, system: str | None = None,
                       tools: Sequence[Mapping[str, Any]] | None = None, max_tokens: int | None = None,
                       model: str | None = None, stream: bool = False, temperature: float | None = None,
                       on_text: TextProgress | None = None, cache: bool = True) -> Completion:
        """Complete through the chain, preferred model first (``model`` is ignored), and note the episode."""
        try:
            completion, route, failure = await self.chain.complete_via(
                self.preferred, messages, system=system, tools=tools, max_tokens=max_tokens, stream=stream,
                temperature=temperature, on_text=on_text, reroute=True, cache=cache)
        except Rerouted as rerouted:
            self._rerouted_by = rerouted.failure
            raise
        finally:
            if self.chain.on_chat_call is not None:
                self.chain.on_chat_call()
        failure, self._rerouted_by = failure or self._rerouted_by, None
        self.answered_by = route
        if route is self.preferred:
            self._told = None
            self._notice = None
        elif self._told is not route:
            self._told = route
            why = _why(failure) if failure is not None else "is cooling down after a failure"
            self._notice = (f"ℹ️ Answered by {route.name}: {self.preferred.name} {why}; it is tried again "
                            f"after {self.chain.cooldowns.seconds:.0f} s.")
        return completion

    def take_notice(self) -> str | None:
        """The line saying another model answered, once per fallback episode (None otherwise)."""
        notice, self._notice = self._notice, None
        return notice

    async def aclose(self) -> None:
        """Nothing of its own to close: the chain owns the providers."""
