"""Loaders for the agent-trajectory corpora: Claude Code sessions, mini-swe-agent runs, τ-bench dialogues."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench._corpus_common import (
    CorpusFormatError,
    Message,
    Transcript,
    finish,
    json_arguments,
    read_json,
    safe_name,
    tool_call,
)

# ---------------------------------------------------------------------------------------------- Claude Code


def _anthropic_image(block: dict[str, Any]) -> Message:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    else:
        url = str(source.get("url", ""))
    return {"type": "image_url", "image_url": {"url": url}}


def _parts_content(parts: list[Message]) -> str | list[Message]:
    """Text-only part lists collapse to one string; lists holding images stay lists of parts."""
    if any(p["type"] != "text" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _blocks_to_parts(blocks: Iterable[Any]) -> list[Message]:
    parts: list[Message] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image":
            parts.append(_anthropic_image(block))
    return parts


def _tool_result_message(block: dict[str, Any]) -> Message:
    raw = block.get("content")
    parts = _blocks_to_parts([raw] if isinstance(raw, str) else raw or [])
    if block.get("is_error"):
        parts.insert(0, {"type": "text", "text": "[error]"})
    content = _parts_content(parts) if parts else ""
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id")), "content": content}


class _AssistantDraft:
    """Content blocks of one Anthropic API message, which Claude Code spreads over several lines."""

    def __init__(self, message_id: str | None) -> None:
        self.message_id = message_id
        self.texts: list[str] = []
        self.calls: list[Message] = []

    def add(self, blocks: Iterable[Any], stats: Counter[str]) -> None:
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else "text"
            if kind == "text":
                text = block.get("text", "") if isinstance(block, dict) else str(block)
                if text:
                    self.texts.append(text)
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
                self.calls.append(tool_call(str(block["id"]), str(block.get("name", "")), arguments))
            else:
                stats[f"{kind}_blocks_dropped"] += 1

    def message(self) -> Message | None:
        if not self.texts and not self.calls:
            return None
        message: Message = {"role": "assistant", "content": "\n\n".join(self.texts) or None}
        if self.calls:
            message["tool_calls"] = self.calls
        return message


def _claude_events(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise CorpusFormatError(f"{path}:{number}: not valid JSON ({exc})") from None
            if not isinstance(event, dict):
                raise CorpusFormatError(f"{path}:{number}: expected a JSON object")
            yield event


def load_claude_code(path: Path) -> list[Transcript]:
    """One Claude Code session JSONL → one transcript (main thread only).

    Sidechain (sub-agent), ``system`` and ``isMeta`` events and thinking blocks are dropped and counted in
    ``meta["dropped"]``; session titles go to ``meta["titles"]``; each automatic-compaction summary is held
    out as ``meta["compact_summaries"]`` (``{"index": <position in messages>, "content": str}``), since it
    replaced history that the transcript keeps verbatim.
    """
    path = Path(path)
    messages: list[Message] = []
    stats: Counter[str] = Counter()
    titles: list[str] = []
    summaries: list[dict[str, Any]] = []
    models: set[str] = set()
    draft: _AssistantDraft | None = None

    def flush() -> None:
        nonlocal draft
        if draft is not None and (message := draft.message()) is not None:
            messages.append(message)
        draft = None

    for event in _claude_events(path):
        kind = event.get("type")
        if kind == "summary":
            titles.append(str(event.get("summary", "")))
            continue
        if kind not in ("user", "assistant"):
            stats[f"{kind}_events"] += 1
            continue
        if event.get("isSidechain"):
            stats["sidechain_events"] += 1
            continue
        body = event.get("message") or {}
        content = body.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        if kind == "assistant":
            if draft is None or draft.message_id != body.get("id"):
                flush()
                draft = _AssistantDraft(body.get("id"))
            draft.add(blocks, stats)
            if body.get("model"):
                models.add(str(body["model"]))
            continue
        flush()
        if event.get("isMeta"):
            stats["meta_events"] += 1
            continue
        if event.get("isCompactSummary"):
            text = _parts_content(_blocks_to_parts(blocks))
            summaries.append({"index": len(messages), "content": text})
            continue
        tool_blocks = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        stats["tool_errors"] += sum(1 for b in tool_blocks if b.get("is_error"))
        messages.extend(_tool_result_message(b) for b in tool_blocks)
        parts = _blocks_to_parts(b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result"))
        if any(p["type"] != "text" or p["text"] for p in parts):
            messages.append({"role": "user", "content": _parts_content(parts)})
    flush()
    tool_errors = stats.pop("tool_errors", 0)
    meta = {
        "source": str(path),
        "titles": titles,
        "compact_summaries": summaries,
        "models": sorted(models),
        "dropped": dict(stats),
        "tool_errors": tool_errors,
    }
    return [finish("claude_code", path.name.removesuffix(".jsonl"), messages, meta)]


# ---------------------------------------------------------------------------------------------- mini-swe-agent

# The same action pattern mini-swe-agent itself parses.
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_FORMAT_ERROR = "Please always provide EXACTLY ONE action"
_CALL_ID_LIMIT = 40  # OpenAI rejects longer tool_call ids


def _call_prefix(instance: str) -> str:
    slug = safe_name(instance)
    room = _CALL_ID_LIMIT - len("call__9999")
    return f"call_{slug[:room]}"


def _results_summary(folder: Path) -> dict[str, bool]:
    summary = folder / "results_summary.json"
    if not summary.is_file():
        return {}
    return {item["instance_id"]: bool(item.get("resolved")) for item in read_json(summary).get("instances", [])}


def load_miniswe(path: Path) -> list[Transcript]:
    """One mini-swe-agent ``*.traj.json`` → one transcript; each single bash block becomes a ``bash`` tool call.

    Call ids are ``call_<instance>_<step>``, stable across runs. An assistant turn whose blocks the harness
    rejected (format error) keeps its text and carries no tool call; the rejection stays a user message.
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise CorpusFormatError(f"{path}: expected an object with a 'messages' list")
    source: list[dict[str, Any]] = data["messages"]
    instance = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
    prefix = _call_prefix(instance)
    messages: list[Message] = []
    pending: str | None = None
    step = 0
    format_errors = 0
    for index, item in enumerate(source):
        role, text = item.get("role"), str(item.get("content") or "")
        if role == "assistant":
            step += 1
            blocks = _BASH_BLOCK.findall(text)
            following = source[index + 1] if index + 1 < len(source) else None
            rejected = following is not None and str(following.get("content", "")).startswith(_FORMAT_ERROR)
            if len(blocks) == 1 and not rejected:
                pending = f"{prefix}_{step}"
                thought = _BASH_BLOCK.sub("", text, count=1).strip()
                arguments = json.dumps({"command": blocks[0]}, ensure_ascii=False)
                messages.append(
                    {
                        "role": "assistant",
                        "content": thought or None,
                        "tool_calls": [tool_call(pending, "bash", arguments)],
                    }
                )
            else:
                pending = None
                messages.append({"role": "assistant", "content": text})
        elif role == "user" and pending is not None:
            messages.append({"role": "tool", "tool_call_id": pending, "content": text})
            pending = None
        elif role in ("system", "user"):
            format_errors += text.startswith(_FORMAT_ERROR)
            messages.append({"role": role, "content": text})
        else:
            raise CorpusFormatError(f"{path}: message {index} has unexpected role {role!r}")
    info = data.get("info") or {}
    meta = {
        "source": str(path),
        "instance_id": instance,
        "resolved": _results_summary(path.parent.parent).get(instance),
        "exit_status": info.get("exit_status"),
        "submission": info.get("submission"),
        "format_errors": format_errors,
    }
    return [finish("miniswe", instance, messages, meta)]


# ---------------------------------------------------------------------------------------------- τ-bench


def _tau_message(message: dict[str, Any], stats: Counter[str]) -> Message:
    out = {k: v for k, v in message.items() if k in ("role", "content", "name", "tool_call_id")}
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            fn = call.get("function") or {}
            arguments, repaired = json_arguments(fn.get("arguments"))
            stats["arguments_repaired"] += repaired
            calls.append(tool_call(str(call["id"]), str(fn.get("name", "")), arguments))
        out["tool_calls"] = calls
    return out


def load_tau_bench(path: Path) -> list[Transcript]:
    """A τ-bench trajectories file (a JSON array) → one transcript per trajectory, named ``task<N>_trial<M>``.

    Messages are already OpenAI format; they are copied with arguments checked to be JSON strings.
    ``meta`` carries ``reward``, ``task_id``, ``trial``, the ground-truth ``actions`` and the hidden
    ``instruction`` of the simulated user.
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise CorpusFormatError(f"{path}: expected a JSON array of trajectories")
    transcripts = []
    for item in data:
        stats: Counter[str] = Counter()
        messages = [_tau_message(m, stats) for m in item.get("traj") or []]
        task = (item.get("info") or {}).get("task") or {}
        meta = {
            "source": str(path),
            "task_id": item.get("task_id"),
            "trial": item.get("trial"),
            "reward": item.get("reward"),
            "actions": task.get("actions", []),
            "instruction": task.get("instruction"),
            "arguments_repaired": stats["arguments_repaired"],
        }
        name = f"{path.stem}/task{item.get('task_id')}_trial{item.get('trial')}"
        transcripts.append(finish("tau_bench", name, messages, meta))
    return transcripts


