"""``/model``: show the configured models and this chat's, or (admins) pick the chat's model.

The choice is one of the configured models (``llm.model`` and ``llm.fallbacks``), stored per chat, so it
survives restarts. Failover never swaps it silently: when another model answers in its place, the answer
says so (`agent.llm.failover.ChatFailover.take_notice`).
"""

from __future__ import annotations

from agent.llm.failover import ChatFailover, FailoverProvider
from gateway.conversation.session import LiveSession, SessionManager

__all__ = ["MODEL_REFUSAL", "format_models", "model_command"]

MODEL_REFUSAL = "Sorry, only admins can change this chat's model. /model shows the models."
RESET = "reset"


def format_models(chain: FailoverProvider, chat: ChatFailover) -> str:
    """The reply to a bare ``/model``: this chat's model, the one answering when that differs, and the list."""
    main = chain.main.name
    own = chat.preferred.name
    lines = [f"This chat's model: {own}" + (" (the main model)" if own == main else "")]
    upcoming = chat.planned().model
    if upcoming != own:
        lines.append(f"Answering now: {upcoming} ({own} failed and is skipped for another "
                     f"{chain.cooldowns.remaining(own):.0f} s)")
    listed = [f"{name} (main)" if name == main else name for name in chain.names()]
    lines.append(f"Models: {', '.join(listed)}")
    if len(listed) > 1:
        lines.append(f"Admins pick one with /model NAME; /model {RESET} goes back to {main}.")
    return "\n".join(lines)


async def model_command(sessions: SessionManager, live: LiveSession, args: str, *, admin: bool) -> str:
    """``/model [NAME | reset]``: show the models (everyone), or set / reset this chat's model (admins)."""
    chain = sessions.rt.provider
    chat = live.models or chain.for_chat()
    wanted = args.strip()
    if not wanted:
        return format_models(chain, chat)
    if not admin:
        return MODEL_REFUSAL
    if wanted.lower() == RESET:
        await sessions.set_model(live, None)
        return f"This chat uses the main model again: {chain.main.name}."
    if chain.route(wanted) is None:
        return f"No model called {wanted!r} is configured. Models: {', '.join(chain.names())}."
    await sessions.set_model(live, None if wanted == chain.main.name else wanted)
    return f"This chat's model is now {wanted}; it answers from the next message."
