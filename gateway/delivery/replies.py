"""Bounding what goes out: one answer becomes at most a few chat messages, never hundreds.

The whole answer stays stored in the conversation (and the model remembers it); only what is sent is cut, at
a line or word boundary, with a note saying how much was left out and how to get it.
"""

from __future__ import annotations

__all__ = ["cap_reply", "cut_note"]

_FENCE = "```"


def cut_note(left_out: int) -> str:
    """The line that ends a cut reply."""
    return (f"\n\n[… reply cut here: {left_out:,} more characters. The whole answer is stored; ask me to continue "
            "or to send the rest in parts.]")


def cap_reply(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its start (an open code block closed) and a note."""
    if len(text) <= limit:
        return text
    budget = max(limit - len(cut_note(len(text))) - len(_FENCE) - 1, limit // 2)
    head = text[:budget]
    # Cut where a reader would: at the last line break, else the last space, in the final fifth.
    for boundary in ("\n", " "):
        at = head.rfind(boundary)
        if at >= budget * 4 // 5:
            head = head[:at]
            break
    left_out = len(text) - len(head)
    head = head.rstrip()
    if head.count(_FENCE) % 2:
        head += "\n" + _FENCE
    return head + cut_note(left_out)
