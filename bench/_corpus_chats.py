"""Loaders for the group-chat and long-conversation corpora: IRC logs and LoCoMo."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench._corpus_common import QA, CorpusFormatError, Message, Transcript, finish, read_json, safe_name

# ---------------------------------------------------------------------------------------------- IRC

# `[HH:MM] <nick> text` (ubuntu, #linux) and `<channel> YYYY-MM-DD [HH:MM:SS] <nick>\t text` (new domains);
# `-nick- text` lines are bot notices (rust's `-eval-`); `* nick action` lines are /me actions; `===` lines
# are joins, parts, renames and mode changes.
_IRC_SAY = re.compile(r"^(?:\S+ \d{4}-\d\d-\d\d )?\[([\d:]+)\] (?:<([^>]*)>|-([^\s-][^\s]*)-)\s?(.*)$")
_IRC_ACTION = re.compile(r"^(?:\S+ \d{4}-\d\d-\d\d )?\[([\d:]+)\]\s+\* (\S+)\s*(.*)$")


def _irc_links(path: Path) -> list[tuple[int, int]]:
    stem = path.name.removesuffix(".raw.txt").removesuffix(".ascii.txt")
    annotation = path.with_name(f"{stem}.annotation.txt")
    if not annotation.is_file():
        return []
    links = []
    for line in annotation.read_text(encoding="utf-8").split("\n"):
        fields = line.split()
        if len(fields) >= 2:
            links.append((int(fields[0]), int(fields[1])))
    return links


def load_irc(path: Path) -> list[Transcript]:
    """One IRC log → one transcript: each chat line a ``user`` message with ``name`` = sanitized nick.

    Join/part/mode lines are skipped (counted in ``meta["skipped_lines"]``); ``/me`` actions are kept as
    ``* nick action``. Line numbers are the ids the reply annotations use, so ``meta["lines"][i]`` is the
    source line of message ``i`` and ``meta["links"]`` holds the gold ``(earlier_line, reply_line)`` pairs
    (a self-link starts a new conversation; links may point at skipped join/part lines).
    """
    path = Path(path)
    # Split on "\n" only: some logs hold control characters that str.splitlines would treat as breaks,
    # shifting the line numbers the annotations refer to.
    raw_lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()
    messages: list[Message] = []
    lines: list[int] = []
    skipped = 0
    for number, raw in enumerate(raw_lines):
        line = raw.rstrip("\r")
        if said := _IRC_SAY.match(line):
            nick, text = said.group(2) or said.group(3), said.group(4).strip()
        elif acted := _IRC_ACTION.match(line):
            nick = acted.group(2)
            text = f"* {nick} {acted.group(3).strip()}".rstrip()
        else:
            skipped += 1
            continue
        messages.append({"role": "user", "name": safe_name(nick), "content": text})
        lines.append(number)
    name = f"{path.parent.name}/{path.name.removesuffix('.raw.txt').removesuffix('.ascii.txt')}"
    meta = {"source": str(path), "lines": lines, "links": _irc_links(path), "skipped_lines": skipped}
    return [finish("irc", name, messages, meta)]


# ---------------------------------------------------------------------------------------------- LoCoMo


def _session_numbers(conversation: dict[str, Any]) -> list[int]:
    numbers = (re.fullmatch(r"session_(\d+)", key) for key in conversation)
    return sorted(int(m.group(1)) for m in numbers if m)


_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


def _evidence_ids(raw: Iterable[Any]) -> tuple[str, ...]:
    """Normalized ``dia_id``s: upstream has a few entries like ``"D8:6; D9:17"``, ``"D30:05"`` or ``"D:11:26"``."""
    return tuple(f"D{int(s)}:{int(t)}" for entry in raw for s, t in _DIA_ID.findall(str(entry)))


def load_locomo(path: Path) -> list[Transcript]:
    """LoCoMo's JSON → one transcript per conversation; turns are ``user`` messages with ``name`` = speaker.

    A ``system`` marker ``[Session k — <date>]`` opens each session (temporal questions need the dates).
    ``meta["qa"]`` is the list of ``QA`` items and ``meta["dia_index"]`` maps each ``dia_id`` to the index
    of its message, so fact-retention benchmarks can check whether the evidence turns survived.
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise CorpusFormatError(f"{path}: expected a JSON array of conversations")
    transcripts = []
    for item in data:
        conversation = item["conversation"]
        messages: list[Message] = []
        dia_index: dict[str, int] = {}
        for number in _session_numbers(conversation):
            date = conversation.get(f"session_{number}_date_time", "unknown date")
            messages.append({"role": "system", "content": f"[Session {number} — {date}]"})
            for turn in conversation[f"session_{number}"]:
                text = str(turn.get("text", ""))
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                dia_index[str(turn["dia_id"])] = len(messages)
                messages.append({"role": "user", "name": safe_name(str(turn["speaker"])), "content": text})
        qa = [
            QA(
                question=str(q["question"]),
                answer=None if q.get("answer") is None else str(q["answer"]),
                evidence=_evidence_ids(q.get("evidence") or ()),
                category=int(q["category"]),
                adversarial_answer=q.get("adversarial_answer"),
            )
            for q in item.get("qa") or []
        ]
        meta = {
            "source": str(path),
            "speakers": (conversation.get("speaker_a"), conversation.get("speaker_b")),
            "qa": qa,
            "dia_index": dia_index,
            "session_summary": item.get("session_summary", {}),
        }
        transcripts.append(finish("locomo", str(item.get("sample_id")), messages, meta))
    return transcripts


