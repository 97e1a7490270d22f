"""What the chat is shown when a message's handling ends: a turn's answer, cut like any reply, saying why it
stopped short and, once per fallback episode, that another model answered; or the apology for a failure."""

from __future__ import annotations

from collections.abc import Callable

from adapters.base import Inbound, Outbound
from agent.turn import StopReason, TurnResult
from gateway.conversation.session import LiveSession
from gateway.delivery.replies import cap_reply
from gateway.intake.busy import RunningTurn

__all__ = [
    "EMPTY_ANSWER",
    "FAILURE_TEXT",
    "INTERRUPTED_BY_NEW_TEXT",
    "INTERRUPTED_TEXT",
    "STOPPED_TEXT",
    "answer_text",
    "composer",
]

FAILURE_TEXT = "⚠️ Something went wrong while handling your message. Please try again."
EMPTY_ANSWER = "(The model returned an empty answer.)"
INTERRUPTED_TEXT = "⚠️ I was interrupted (the bot is restarting) before I could answer. Ask me to continue."
STOPPED_TEXT = "⏹️ Stopped."
INTERRUPTED_BY_NEW_TEXT = "⏹️ Interrupted by a newer message."


def composer(inbound: Inbound, running: RunningTurn, live: LiveSession,
             max_reply_chars: int) -> Callable[[TurnResult], Outbound | None]:
    """The answer a turn of ``inbound`` ends with, cut like any reply (None: nothing more to send); when
    another model answered in the chat's model's place, the answer says so once per fallback episode."""

    def compose(result: TurnResult) -> Outbound | None:
        text = answer_text(result, running)
        if not text:
            return None
        text = cap_reply(text, max_reply_chars)
        notice = live.models.take_notice() if live.models is not None else None
        return Outbound.to(inbound, f"{text}\n\n{notice}" if notice else text)

    return compose


def answer_text(result: TurnResult, running: RunningTurn) -> str | None:
    """What the chat is shown when a turn ends (None: nothing more, the loop already sent its error)."""
    if result.stop_reason is StopReason.ERROR:
        return None
    if result.stop_reason is not StopReason.CANCELLED:
        return result.text or EMPTY_ANSWER
    # Cut off: keep what was streamed, saying why it stops there.
    why = {"stop": STOPPED_TEXT, "interrupt": INTERRUPTED_BY_NEW_TEXT}.get(
        running.stopped or "", INTERRUPTED_TEXT)  # no cause of ours: shutdown
    return f"{result.text}\n\n{why}" if result.text else why
