"""What every corpus loader shares: the records they return and the message-shaping helpers."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("bench.corpus")

NO_RESULT = "[no result recorded]"
REPO_ROOT = Path(__file__).resolve().parent.parent

Message = dict[str, Any]


class CorpusFormatError(ValueError):
    """A corpus file does not have the shape its README describes."""


@dataclass(frozen=True)
class Transcript:
    """One conversation: ``corpus`` is its kind (see ``KINDS``), ``name`` is unique within the kind."""

    corpus: str
    name: str
    messages: list[Message]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QA:
    """A LoCoMo question; ``evidence`` holds the ``dia_id``s of the turns that support the answer."""

    question: str
    answer: str | None
    evidence: tuple[str, ...]
    category: int
    adversarial_answer: str | None = None


def corpus_dir() -> Path | None:
    """The corpus root: ``$CONCORD_CORPUS_DIR``, else where the development checkouts keep it beside the
    repository; None when it is absent."""
    override = os.environ.get("CONCORD_CORPUS_DIR")
    path = Path(override) if override else REPO_ROOT.parent / "shared" / "corpus"
    return path if path.is_dir() else None


# ---------------------------------------------------------------------------------------------- shared helpers


def json_arguments(value: Any) -> tuple[str, bool]:
    """Tool-call arguments as a JSON string; the flag says whether the source value had to be repaired."""
    if isinstance(value, str):
        try:
            json.loads(value)
            return value, False
        except ValueError:
            return json.dumps({"_raw": value}, ensure_ascii=False), True
    return json.dumps(value if value is not None else {}, ensure_ascii=False), True


def tool_call(call_id: str, name: str, arguments: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def pair_tool_results(messages: list[Message]) -> tuple[list[Message], dict[str, int]]:
    """Put each call's result right after its assistant message, with every call id unique.

    A call takes the first unused result with its id that comes after it (τ-bench reuses ids, so order is
    what pairs them). Missing results are synthesized; results no earlier call claims are dropped; a
    repeated call id is renamed ``<id>_<n>`` on both the call and its result. Returns the new list and the
    counts ``synthesized_results``, ``orphans_dropped`` and ``ids_renamed``.
    """
    waiting: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            waiting.setdefault(str(message.get("tool_call_id")), []).append(index)
    out: list[Message] = []
    seen_ids: set[str] = set()
    counts = {"synthesized_results": 0, "orphans_dropped": 0, "ids_renamed": 0}
    used = 0
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            continue
        calls = message.get("tool_calls") or []
        results: list[Message] = []
        renamed: list[Message] = []
        for call in calls:
            queue = waiting.get(call["id"], [])
            while queue and queue[0] < index:
                queue.pop(0)
            if queue:
                used += 1
                result = messages[queue.pop(0)]
            else:
                counts["synthesized_results"] += 1
                result = {"role": "tool", "tool_call_id": call["id"], "content": NO_RESULT}
            call_id = call["id"]
            suffix = 1
            while call_id in seen_ids:
                suffix += 1
                call_id = f"{call['id']}_{suffix}"
            if call_id != call["id"]:
                counts["ids_renamed"] += 1
                call = {**call, "id": call_id}
                result = {**result, "tool_call_id": call_id}
            seen_ids.add(call_id)
            renamed.append(call)
            results.append(result)
        changed = any(new is not old for new, old in zip(renamed, calls, strict=True))
        out.append({**message, "tool_calls": renamed} if changed else message)
        out.extend(results)
    counts["orphans_dropped"] = sum(1 for m in messages if m.get("role") == "tool") - used
    return out, counts


def finish(corpus: str, name: str, messages: list[Message], meta: dict[str, Any]) -> Transcript:
    paired, counts = pair_tool_results(messages)
    return Transcript(corpus, name, paired, {**meta, **counts})


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CorpusFormatError(f"{path}: not valid JSON ({exc})") from None


_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]+")


def safe_name(raw: str) -> str:
    """A speaker name as OpenAI's ``name`` field allows: ``[A-Za-z0-9_-]{1,64}``."""
    return _NAME_BAD.sub("_", raw).strip("_")[:64] or "anonymous"


