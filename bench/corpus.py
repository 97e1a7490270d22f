"""Real-data corpus loaders: every sub-corpus of ``../shared/corpus`` as OpenAI-format message lists.

Each folder's README describes its on-disk format and the mapping implemented here. Every transcript obeys the
internal message invariants (valid roles, each tool call answered exactly once right after its assistant
message, arguments as JSON strings); where a source genuinely lacks a result, a ``[no result recorded]`` tool
message is synthesized and counted in ``meta["synthesized_results"]``.

    python -m bench.corpus          # per-corpus counts
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "NO_RESULT",
    "QA",
    "CorpusFormatError",
    "Transcript",
    "corpus_dir",
    "iter_transcripts",
    "load_all",
    "load_claude_code",
    "load_irc",
    "load_locomo",
    "load_miniswe",
    "load_tau_bench",
    "main",
]

log = logging.getLogger(__name__)

NO_RESULT = "[no result recorded]"
_REPO_ROOT = Path(__file__).resolve().parent.parent

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
    """The corpus root: ``$CONCORD_CORPUS_DIR`` or ``<repo>/../shared/corpus``; None when it is absent."""
    override = os.environ.get("CONCORD_CORPUS_DIR")
    path = Path(override) if override else _REPO_ROOT.parent / "shared" / "corpus"
    return path if path.is_dir() else None


# ---------------------------------------------------------------------------------------------- shared helpers


def _json_arguments(value: Any) -> tuple[str, bool]:
    """Tool-call arguments as a JSON string; the flag says whether the source value had to be repaired."""
    if isinstance(value, str):
        try:
            json.loads(value)
            return value, False
        except ValueError:
            return json.dumps({"_raw": value}, ensure_ascii=False), True
    return json.dumps(value if value is not None else {}, ensure_ascii=False), True


def _tool_call(call_id: str, name: str, arguments: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _pair_tool_results(messages: list[Message]) -> tuple[list[Message], dict[str, int]]:
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


def _finish(corpus: str, name: str, messages: list[Message], meta: dict[str, Any]) -> Transcript:
    paired, counts = _pair_tool_results(messages)
    return Transcript(corpus, name, paired, {**meta, **counts})


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CorpusFormatError(f"{path}: not valid JSON ({exc})") from None


_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]+")


def _safe_name(raw: str) -> str:
    """A speaker name as OpenAI's ``name`` field allows: ``[A-Za-z0-9_-]{1,64}``."""
    return _NAME_BAD.sub("_", raw).strip("_")[:64] or "anonymous"


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
                self.calls.append(_tool_call(str(block["id"]), str(block.get("name", "")), arguments))
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
    return [_finish("claude_code", path.name.removesuffix(".jsonl"), messages, meta)]


# ---------------------------------------------------------------------------------------------- mini-swe-agent

# The same action pattern mini-swe-agent itself parses.
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_FORMAT_ERROR = "Please always provide EXACTLY ONE action"
_CALL_ID_LIMIT = 40  # OpenAI rejects longer tool_call ids


def _call_prefix(instance: str) -> str:
    slug = _safe_name(instance)
    room = _CALL_ID_LIMIT - len("call__9999")
    return f"call_{slug[:room]}"


def _results_summary(folder: Path) -> dict[str, bool]:
    summary = folder / "results_summary.json"
    if not summary.is_file():
        return {}
    return {item["instance_id"]: bool(item.get("resolved")) for item in _read_json(summary).get("instances", [])}


def load_miniswe(path: Path) -> list[Transcript]:
    """One mini-swe-agent ``*.traj.json`` → one transcript; each single bash block becomes a ``bash`` tool call.

    Call ids are ``call_<instance>_<step>``, stable across runs. An assistant turn whose blocks the harness
    rejected (format error) keeps its text and carries no tool call; the rejection stays a user message.
    """
    path = Path(path)
    data = _read_json(path)
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
                        "tool_calls": [_tool_call(pending, "bash", arguments)],
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
    return [_finish("miniswe", instance, messages, meta)]


# ---------------------------------------------------------------------------------------------- τ-bench


def _tau_message(message: dict[str, Any], stats: Counter[str]) -> Message:
    out = {k: v for k, v in message.items() if k in ("role", "content", "name", "tool_call_id")}
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            fn = call.get("function") or {}
            arguments, repaired = _json_arguments(fn.get("arguments"))
            stats["arguments_repaired"] += repaired
            calls.append(_tool_call(str(call["id"]), str(fn.get("name", "")), arguments))
        out["tool_calls"] = calls
    return out


def load_tau_bench(path: Path) -> list[Transcript]:
    """A τ-bench trajectories file (a JSON array) → one transcript per trajectory, named ``task<N>_trial<M>``.

    Messages are already OpenAI format; they are copied with arguments checked to be JSON strings.
    ``meta`` carries ``reward``, ``task_id``, ``trial``, the ground-truth ``actions`` and the hidden
    ``instruction`` of the simulated user.
    """
    path = Path(path)
    data = _read_json(path)
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
        transcripts.append(_finish("tau_bench", name, messages, meta))
    return transcripts


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
        messages.append({"role": "user", "name": _safe_name(nick), "content": text})
        lines.append(number)
    name = f"{path.parent.name}/{path.name.removesuffix('.raw.txt').removesuffix('.ascii.txt')}"
    meta = {"source": str(path), "lines": lines, "links": _irc_links(path), "skipped_lines": skipped}
    return [_finish("irc", name, messages, meta)]


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
    data = _read_json(path)
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
                messages.append({"role": "user", "name": _safe_name(str(turn["speaker"])), "content": text})
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
        transcripts.append(_finish("locomo", str(item.get("sample_id")), messages, meta))
    return transcripts


# ---------------------------------------------------------------------------------------------- discovery

Loader = Callable[[Path], list[Transcript]]

# kind → (folder name pattern, file patterns inside it, loader); folders are found by pattern so a renamed
# snapshot (e.g. another model's trajectories) is picked up too.
_SOURCES: dict[str, tuple[str, tuple[str, ...], Loader]] = {
    "claude_code": ("*claude-code*", ("**/*.jsonl",), load_claude_code),
    "miniswe": ("*miniswe*", ("**/*.traj.json",), load_miniswe),
    "tau_bench": ("*tau-bench*", ("*.json",), load_tau_bench),
    "irc": ("*irc*", ("**/*.raw.txt", "**/*.ascii.txt"), load_irc),
    "locomo": ("*locomo*", ("*.json",), load_locomo),
}
KINDS: tuple[str, ...] = tuple(_SOURCES)


def _files(root: Path, kind: str) -> list[Path]:
    folder_pattern, file_patterns, _ = _SOURCES[kind]
    found: set[Path] = set()
    for folder in root.glob(folder_pattern):
        if folder.is_dir():
            for pattern in file_patterns:
                found.update(p for p in folder.glob(pattern) if p.is_file())
    return sorted(found)


def iter_transcripts(root: Path | None = None, kinds: Iterable[str] | None = None) -> Iterator[Transcript]:
    """Yield every transcript of the chosen kinds (default: all of ``KINDS``), kind by kind, files sorted.

    With no corpus (``root`` None and ``corpus_dir()`` None, or ``root`` not a directory) it yields nothing
    and logs one warning. An unknown kind raises ``ValueError``.
    """
    chosen = list(KINDS if kinds is None else kinds)
    unknown = [k for k in chosen if k not in _SOURCES]
    if unknown:
        raise ValueError(f"unknown corpus kind(s) {unknown}; allowed: {', '.join(KINDS)}")
    base = Path(root) if root is not None else corpus_dir()
    if base is None or not base.is_dir():
        where = base or os.environ.get("CONCORD_CORPUS_DIR") or _REPO_ROOT.parent / "shared" / "corpus"
        log.warning("corpus not found at %s; set CONCORD_CORPUS_DIR to use another location", where)
        return
    for kind in chosen:
        loader = _SOURCES[kind][2]
        for path in _files(base, kind):
            yield from loader(path)


def load_all(root: Path | None = None) -> list[Transcript]:
    """Every transcript of every kind, as a list (see ``iter_transcripts``)."""
    return list(iter_transcripts(root))


def main() -> None:
    """Print how many transcripts, messages and tool calls each sub-corpus yields."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    root = corpus_dir()
    if root is None:
        console.print("[yellow]corpus not found; set CONCORD_CORPUS_DIR[/yellow]")
        return
    table = Table(title=f"Corpus at {root}")
    for column in ("corpus", "transcripts", "messages", "tool calls", "synthesized results"):
        table.add_column(column, justify="left" if column == "corpus" else "right")
    for kind in KINDS:
        items = list(iter_transcripts(root, [kind]))
        messages = sum(len(t.messages) for t in items)
        calls = sum(len(m.get("tool_calls") or ()) for t in items for m in t.messages)
        synthesized = sum(t.meta["synthesized_results"] for t in items)
        table.add_row(kind, f"{len(items):,}", f"{messages:,}", f"{calls:,}", f"{synthesized:,}")
    console.print(table)


if __name__ == "__main__":
    main()
