"""What an inbound message becomes in its session: the turn's request, or an observed group line, each naming
the platform message it holds (`MessageOrigin`: the key an edit, a deletion or ``/forget`` finds it by, and
where the sender's own text sits in it).

An edit of a message that was answered already arrives as a correction: its text follows a lead saying whose
message it changes (``Ann edited their message #57: …``; in a group the speaker tag names them), and it holds
the edited message's key, so deleting that message erases the correction too.
"""

from __future__ import annotations

from typing import Any

from adapters.base import Inbound
from gateway.conversation.continuity import with_note
from gateway.conversation.prompt import speaker_tag
from gateway.intake.inbox import message_key
from gateway.store import MessageOrigin

__all__ = ["CONTEXT_HEADER", "correction_lead", "message_origin", "observed_line", "request_message"]

CONTEXT_HEADER = "[Earlier messages in this channel, not addressed to you]"


def message_origin(inbound: Inbound, start: int) -> dict[str, Any]:
    """The origin of a stored message in whose text ``inbound``'s own text starts at ``start``."""
    return MessageOrigin(message=message_key(inbound), author=f"{inbound.platform}:{inbound.user_id}",
                         name=inbound.user_name, at=inbound.received_at.isoformat(),
                         span=(start, start + len(inbound.text))).to_json()


def correction_lead(edit: Inbound, number: int | None, *, group: bool) -> str:
    """What goes in front of an edited text: whose message it changes and which (``number``: its stored
    number, None when the edited message was never stored)."""
    which = f"their message #{number}" if number is not None else "an earlier message"
    return f"edited {which}: " if group else f"{edit.user_name or 'The user'} edited {which}: "


def observed_line(inbound: Inbound, lead: str = "") -> dict[str, Any]:
    """An unaddressed group message as stored: the speaker's tag, the text, and any attachment named."""
    notes = [f"[Attached {a.kind}: {a.name}]" for a in inbound.attachments]
    head = speaker_tag(inbound.user_name, lead)
    return {"role": "user", "content": head + "\n".join(part for part in (inbound.text, *notes) if part),
            "origin": message_origin(inbound, len(head))}


def request_message(inbound: Inbound, *, group: bool, earlier: list[str], note: str | None,
                    lead: str = "") -> dict[str, Any]:
    """The user message a turn answers: in a group tagged with the speaker and after the ``earlier`` lines
    nobody addressed to the bot, behind a continuity ``note``, with attachments shown or named."""
    text = lead + inbound.text
    if group:
        text = speaker_tag(inbound.user_name, text)
        if earlier:
            text = "\n".join([CONTEXT_HEADER, *earlier, "", text])
    text = with_note(note, text)
    origin = message_origin(inbound, len(text) - len(inbound.text))
    images = [a.data_url or a.url for a in inbound.attachments if a.kind == "image" and (a.data_url or a.url)]
    # What the model cannot see is at least named, so a file-only message is never an empty turn.
    notes = [f"[Attached {a.kind}: {a.name} ({a.mime}, {a.size:,} bytes)]" for a in inbound.attachments
             if not (a.kind == "image" and (a.data_url or a.url))]
    text = "\n".join(part for part in (text, *notes) if part)
    if not images:
        return {"role": "user", "content": text, "origin": origin}
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        *({"type": "image_url", "image_url": {"url": u}} for u in images)],
            "origin": origin}
