"""The evidence extractor: exact facts of the compacted middle, found without an LLM.

A summary keeps the gist and loses exact values: file paths, the commands that ran and how they ended,
URLs, identifiers, measured numbers, error lines, and the rules the user stated. This stage finds them in
the messages themselves, each with the number of the message it came from, so the ledger (`ledger.py`) can
put them in the summary verbatim and the agent can open the source with ``read_history``.

Everything is pure and deterministic: the same messages give the same facts, in message order. What to
look for is `fact_patterns.SCANNERS`; `fact_scan` decides in one pass which of its finders can find anything
in a text.

A message's facts do not change, so they are found once: a bounded in-process cache keeps them per message,
keyed like the token counts (the text itself, or its digest past 512 characters) plus the results of its
tool calls (a command's exit status comes from its result). `remember_facts` fills it when messages are
stored, so a compaction, a hygiene pass or ``/compress`` later only assembles them. After a restart they are
put back from the records the caller stored with the messages (`agent.compression.prepared`, `adopt_facts`);
what no record holds the first compaction finds again, in one pass per text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.describe import call_arguments, search_exit
from agent.compression.fact_patterns import (
    ERROR_RE,
    SCANNERS,
    STAGES,
    URL_RE,
    command_paths,
    extract_constraints,
)
from agent.compression.fact_scan import GateScan
from agent.compression.messages import Message, content_text, tool_calls_of
from agent.compression.redact import redact_secrets
from agent.compression.summary import is_summary_text
from agent.lru import LruCache
from agent.tokens import INLINE_KEY_CHARS, TokenCounter, key_digest, text_key

__all__ = [
    "FACT_KINDS",
    "Fact",
    "MessageFacts",
    "adopt_facts",
    "clear_fact_cache",
    "extract_constraints",
    "extract_facts",
    "fact_tokens",
    "facts_of_message",
    "gates_in_one_pass",
    "remember_facts",
]

FACT_KINDS = ("constraint", "error", "command", "path", "id", "url", "number")

# Per message and kind: a directory listing or a log dump must not flood the ledger with one message.
_PER_MESSAGE = {"constraint": 8, "error": 24, "command": 8, "path": 64, "id": 10, "url": 6, "number": 10}
_MAX_FACT_CHARS = {"constraint": 300, "error": 500, "command": 300}
_DEFAULT_MAX_CHARS = 200
# Text beyond this is not scanned (a huge tool output is mostly data; its start and end carry the signal).
_SCAN_HEAD, _SCAN_TAIL = 20_000, 8_000

_COMMAND_KEYS = ("command", "cmd", "script")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "target_file", "notebook_path")
_EXIT_RE = re.compile(
    r"(?i)\b(?:exit(?:ed)?(?:\s+with)?(?:\s+code|\s+status)?|return\s*code|returncode|exit_code|status\s+code)"
    r"[\s:=\"'>]{0,4}(-?\d{1,3})\b"
)
# Messages whose facts the cache keeps (an entry holds a few short strings and a 16-byte digest).
_CACHE_SIZE = 50_000
# Fact texts whose token counts are kept (per encoding; a message has a few facts, most of them short).
_TOKENS_CACHE_SIZE = 4 * _CACHE_SIZE
_GATES = GateScan(SCANNERS)


@dataclass(frozen=True, slots=True)
class Fact:
    """One exact fact: its kind (see `FACT_KINDS`), its text (verbatim, secrets redacted), and the number
    of the message it came from (``seq``)."""

    kind: str
    text: str
    seq: int


def _clip(text: str, kind: str) -> str:
    flat = " ".join(text.split())
    limit = _MAX_FACT_CHARS.get(kind, _DEFAULT_MAX_CHARS)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _scanned(text: str) -> str:
    if len(text) <= _SCAN_HEAD + _SCAN_TAIL:
        return text
    return text[:_SCAN_HEAD] + "\n" + text[-_SCAN_TAIL:]


def _exit_note(result: str | None) -> str:
    if result is None:
        return "no result recorded"
    match = search_exit(_EXIT_RE, result)
    if match:
        return f"exit {match.group(1)}"
    return "failed" if any(ERROR_RE.match(line) for line in result.splitlines()[-20:]) else "ran"


def _call_facts(call: Mapping[str, Any], result: str | None) -> Iterator[tuple[str, str]]:
    args = call_arguments(call)
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            yield "command", f"{_clip(value, 'command')} → {_exit_note(result)}"
            # The files a command works on are what the agent acted on; past the clipped command's text only
            # these stay in the ledger.
            yield from (("path", p) for p in command_paths(value[:_SCAN_HEAD]))
            break
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip() and "\n" not in value:
            yield "path", value.strip()
    for value in args.values():
        if isinstance(value, str):
            yield from (("url", u.rstrip(".,:;")) for u in URL_RE.findall(value[:_SCAN_HEAD]))


def _text_facts(text: str, user: bool, stage: str, present: frozenset[str]) -> Iterator[tuple[str, str]]:
    """Raw facts of ``text`` (cut to what is scanned) from the finders of one `STAGES` stage; ``present``: the
    finders whose gate occurs."""
    for scanner in SCANNERS:
        reads = not scanner.not_user if user else not scanner.user_only
        if scanner.stage == stage and reads and scanner.name in present:
            yield from ((scanner.kind, raw) for raw in scanner.find(text))


def _accept(pairs: Iterable[tuple[str, str]], earlier: Sequence[tuple[str, str]],
            redacted: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The (kind, text) facts of ``pairs`` a message keeps after ``earlier`` ones: redacted, clipped, each
    once, at most `_PER_MESSAGE` of a kind."""
    seen = set(earlier)
    counts: dict[str, int] = {}
    for kind, _ in earlier:
        counts[kind] = counts.get(kind, 0) + 1
    kept: list[tuple[str, str]] = []
    for kind, raw in pairs:
        clean = redacted.get(raw)
        if clean is None:
            clean = redacted[raw] = redact_secrets(raw)
        clean = _clip(clean, kind)
        if not clean or (kind, clean) in seen or counts.get(kind, 0) >= _PER_MESSAGE[kind]:
            continue
        seen.add((kind, clean))
        counts[kind] = counts.get(kind, 0) + 1
        kept.append((kind, clean))
    return tuple(kept)


@dataclass(slots=True)
class MessageFacts:
    """What one message yields: its calls' facts, rules and errors (``first``), then the paths of its text
    (``paths``), then its URLs, ids and numbers (``values``) — each None until something asked for it —, and the
    gates found in its text, so that the later scans need no second pass."""

    first: tuple[tuple[str, str], ...]
    paths: tuple[tuple[str, str], ...] | None
    values: tuple[tuple[str, str], ...] | None
    present: frozenset[str]

    def upto(self, stage: str) -> tuple[tuple[str, str], ...]:
        """The facts found in the stages up to ``stage``."""
        if stage == "first":
            return self.first
        found = self.first + (self.paths or ())
        return found if stage == "path" else found + (self.values or ())


_CACHE: LruCache[tuple[Any, ...], MessageFacts] = LruCache(_CACHE_SIZE)
# A handoff summary or a system prompt: no facts.
_NOTHING = MessageFacts((), (), (), frozenset())


# Facts adopted from prepared records (`agent.compression.prepared`), by the `key_digest` of the key they were
# found under, with their texts' token counts and the encoding of those: a message whose key has that digest takes
# them when it is first looked up, so only the messages a compaction reads are checked (their keys digested).
_ADOPTED: LruCache[str, tuple[MessageFacts, Mapping[str, int], str]] = LruCache(_CACHE_SIZE)


def _adopted(key: tuple[Any, ...]) -> MessageFacts | None:
    found = _ADOPTED.get(key_digest(key)) if len(_ADOPTED) else None
    if found is None:
        return None
    facts, tokens, encoding = found
    cache = _tokens_cache(encoding)
    for text, count in tokens.items():
        cache.put(text, count)
    _CACHE.put(key, facts)
    return facts


# Per encoding, per fact text: the tokens of " " + text, what the text adds to its ledger line. (Keyed by the
# text alone: an entry adds no object for the garbage collector to walk, and there are many.)
_TOKENS: dict[str, LruCache[str, int]] = {}


def clear_fact_cache() -> None:
    """Forget every message's facts, adopted ones too, and their token counts (what a restarted process knows)."""
    _CACHE.clear()
    _ADOPTED.clear()
    for cache in list(_TOKENS.values()):
        cache.clear()


def _tokens_cache(encoding: str) -> LruCache[str, int]:
    cache = _TOKENS.get(encoding)
    return _TOKENS.setdefault(encoding, LruCache(_TOKENS_CACHE_SIZE)) if cache is None else cache


def fact_tokens(text: str, counter: TokenCounter) -> int:
    """The tokens a fact's ``text`` adds to its ledger line, after the label: those of ``" " + text`` (a line
    ``- #57 path: a.py`` counts as ``- #57 path:`` and `` a.py`` together, see `agent.compression.ledger`), kept
    per encoding like the facts themselves."""
    cache = _tokens_cache(counter.encoding_name)
    tokens = cache.get(text)
    if tokens is None:
        tokens = counter.count_text(" " + text)
        cache.put(text, tokens)
    return tokens


class _Batch:
    """What the messages of one extraction share: the tool results by call id, the cache keys of long texts
    (each hashed once), and the redactions already made (a path or an id recurs in many messages)."""

    def __init__(self, results: Mapping[str, str] | None) -> None:
        self.results = results or {}
        self.redacted: dict[str, str] = {}
        self._digests: dict[int, tuple[str, str | bytes]] = {}

    def text_key(self, text: str) -> str | bytes:
        """`agent.tokens.text_key` of ``text``, computed once per text object."""
        if len(text) <= INLINE_KEY_CHARS:
            return text
        known = self._digests.get(id(text))
        if known is None or known[0] is not text:
            known = self._digests[id(text)] = (text, text_key(text))
        return known[1]

    def _result_key(self, call: Mapping[str, Any]) -> str | bytes | None:
        result = self.results.get(str(call.get("id")))
        return None if result is None else self.text_key(result)

    def _arguments_key(self, call: Mapping[str, Any]) -> tuple[bool, str | bytes]:
        fn = call.get("function")
        raw = fn.get("arguments") if isinstance(fn, Mapping) else fn
        return isinstance(raw, str), self.text_key(raw if isinstance(raw, str) else repr(raw))

    def key(self, message: Message, text: str) -> tuple[Any, ...]:
        """The cache key of ``message``, whose `content_text` is ``text``: its role, its text, each call's
        arguments and result."""
        role = message.get("role")
        calls = tool_calls_of(message) if role == "assistant" else ()
        return (role, text if len(text) <= INLINE_KEY_CHARS else self.text_key(text),
                tuple((self._arguments_key(call), self._result_key(call)) for call in calls) if calls else ())

    def entry(self, message: Message, text: str, *, stage: str, key: tuple[Any, ...] | None = None,
              known: MessageFacts | None = None) -> MessageFacts:
        """What ``message`` (whose `content_text` is ``text``) yields, its `STAGES` up to ``stage`` filled in, from
        the cache where it has them; ``key``: its `key`, and ``known``: what the caller found under it already
        (None: look)."""
        role = message.get("role")
        entry = known
        if entry is None:
            key = self.key(message, text) if key is None else key
            entry = _CACHE.get(key) or _adopted(key)
        if entry is None:
            calls = tool_calls_of(message) if role == "assistant" else ()
            if role == "system" or is_summary_text(text):
                _CACHE.put(key, _NOTHING)
                return _NOTHING
            user, scanned = role == "user", _scanned(text)
            present = _GATES.present(scanned)
            pairs: list[tuple[str, str]] = []
            for call in calls:
                pairs.extend(_call_facts(call, self.results.get(str(call.get("id")))))
            pairs.extend(_text_facts(scanned, user, "first", present))
            entry = MessageFacts(_accept(pairs, (), self.redacted), None, None, present)
            _CACHE.put(key, entry)
        # Facts of calls, rules and errors come first and take their places in the per-kind caps, then paths.
        if stage != "first" and entry.paths is None:
            found = _text_facts(_scanned(text), role == "user", "path", entry.present)
            entry.paths = _accept(found, entry.first, self.redacted)
        if stage == "value" and entry.values is None:
            found = _text_facts(_scanned(text), role == "user", "value", entry.present)
            entry.values = _accept(found, entry.first + (entry.paths or ()), self.redacted)
        return entry

    def facts(self, message: Message, *, stage: str) -> tuple[tuple[str, str], ...]:
        """The (kind, text) facts of ``message`` found in the `STAGES` up to ``stage`` (see `entry`)."""
        return self.entry(message, content_text(message), stage=stage).upto(stage)


def _results_of(messages: Iterable[Message]) -> dict[str, str]:
    return {str(m.get("tool_call_id")): content_text(m) for m in messages if m.get("role") == "tool"}


def facts_of_message(message: Message, seq: int, results: Mapping[str, str] | None = None, *,
                     values: bool = True) -> list[Fact]:
    """The facts of one message, ``seq`` being its number; ``results`` maps tool-call ids to their result
    text (for the exit status of a command). ``values=False`` skips the costly scan of the text for paths,
    URLs, ids and numbers (rules, errors and the calls' commands and paths are still taken). A handoff
    summary or a system prompt gives none."""
    stage = STAGES[-1] if values else STAGES[0]
    return [Fact(kind, text, seq) for kind, text in _Batch(results).facts(message, stage=stage)]


def remember_facts(messages: Sequence[Message],
                   counter: TokenCounter | None = None) -> list[tuple[tuple[Any, ...], MessageFacts]]:
    """Find and keep the facts of ``messages`` (every kind), so a later compaction only assembles them; with
    ``counter``, their texts' token counts too (`fact_tokens`), so it prices their ledger lines without
    tokenizing them. Returns each message's cache key and facts (every stage filled in).

    For a caller that stores messages as they come (the gateway, after a turn); a tool call's result is
    looked up among ``messages``, so pass a call with its results."""
    batch = _Batch(_results_of(messages))
    found = []
    for message in messages:
        text = content_text(message)
        key = batch.key(message, text)
        entry = batch.entry(message, text, stage=STAGES[-1], key=key)
        if counter is not None:
            for _, fact in entry.upto(STAGES[-1]):
                fact_tokens(fact, counter)
        found.append((key, entry))
    return found


def adopt_facts(digest: str, facts: MessageFacts, tokens: Mapping[str, int], encoding: str) -> None:
    """Keep facts adopted from a prepared record: ``facts`` (every stage filled in) are those of the message whose
    cache key has the `key_digest` ``digest``, and ``tokens`` their texts' `fact_tokens` under ``encoding``
    (taken when the message is first looked up, see `_ADOPTED`)."""
    _ADOPTED.put(digest, (facts, tokens, encoding))


def gates_in_one_pass() -> bool:
    """Whether this process finds the finders' gates in one pass (Hyperscan): a message's `MessageFacts.present`
    depends on it (without the pass every finder counts as present)."""
    return _GATES.active


def extract_facts(messages: Sequence[Message], number: Callable[[int], int], *,
                  scan_chars: int | None = None, path_chars: int | None = None) -> list[Fact]:
    """Every fact of ``messages`` in message order, each once (the newest occurrence wins).

    ``number(i)`` is the message number of ``messages[i]`` (the store's sequence, or a position). With
    ``scan_chars``, only the newest messages, that many characters of their text, are scanned for URLs, ids
    and numbers (the costly scan): a bounded ledger keeps the newest facts anyway; with ``path_chars`` (by
    default ``scan_chars``), that many for paths. Rules, errors and the calls' commands and paths are taken
    from every message.
    """
    batch = _Batch(_results_of(messages))
    texts = [content_text(message) for message in messages]
    # One lock for the whole middle: nearly every message's facts are known (a miss is looked up again below, as
    # an equal message found earlier in this loop may have put it there).
    keys = [batch.key(message, text) for message, text in zip(messages, texts, strict=True)]
    known = _CACHE.get_many(keys)
    newest: dict[tuple[str, str], Fact] = {}

    def take(i: int, pairs: tuple[tuple[str, str], ...]) -> None:
        seq = None
        for pair in pairs:
            if pair not in newest:
                seq = number(i) if seq is None else seq
                newest[pair] = Fact(pair[0], pair[1], seq)

    if scan_chars is not None:
        path_chars = scan_chars if path_chars is None else max(path_chars, scan_chars)
    scanned, most, i = 0, _SCAN_HEAD + _SCAN_TAIL, len(messages) - 1
    while i >= 0:  # the newest messages, as far back as the scans read
        if scan_chars is None or scanned < scan_chars:
            stage = "value"
        elif path_chars is not None and scanned < path_chars:
            stage = "path"
        else:
            break
        scanned += min(len(texts[i]), most)
        entry = batch.entry(messages[i], texts[i], stage=stage, key=keys[i], known=known[i])
        take(i, entry.first)
        take(i, entry.paths or ())
        if stage == "value":
            take(i, entry.values or ())
        i -= 1
    # The rest of the history gives its rules, errors and calls only (known for nearly every message; most of
    # them have none).
    for older in range(i, -1, -1):
        entry = known[older] or batch.entry(messages[older], texts[older], stage="first", key=keys[older])
        if entry.first:
            take(older, entry.first)
    return sorted(newest.values(), key=lambda f: f.seq)
