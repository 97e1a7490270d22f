"""The evidence extractor: exact facts of the compacted middle, found without an LLM.

A summary keeps the gist and loses exact values: file paths, the commands that ran and how they ended,
URLs, identifiers, measured numbers, error lines, and the rules the user stated. This stage finds them in
the messages themselves, each with the number of the message it came from, so the ledger (`ledger.py`) can
put them in the summary verbatim and the agent can open the source with ``read_history``.

Everything is pure and deterministic: the same messages give the same facts, in message order. Patterns
favour precision over recall — a ledger full of prose fragments would cost tokens and trust — so a
constraint needs a deontic cue in an imperative or first/second-person frame ("never push to main", "you
must use UTC", "我们必须用 UTC", "不要改这个文件"), and idioms such as "I must say", "never mind", "don't
know", "别人", "只是" are not rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.describe import call_arguments
from agent.compression.messages import Message, content_text, tool_calls_of
from agent.compression.redact import redact_secrets
from agent.compression.summary import is_summary_text

__all__ = ["FACT_KINDS", "Fact", "extract_constraints", "extract_facts", "facts_of_message"]

FACT_KINDS = ("constraint", "error", "command", "path", "id", "url", "number")

# Per message and kind: a directory listing or a log dump must not flood the ledger with one message.
_PER_MESSAGE = {"constraint": 8, "error": 6, "command": 8, "path": 12, "id": 10, "url": 6, "number": 10}
_MAX_FACT_CHARS = {"constraint": 300, "error": 500, "command": 300}
_DEFAULT_MAX_CHARS = 200
# Text beyond this is not scanned (a huge tool output is mostly data; its start and end carry the signal).
_SCAN_HEAD, _SCAN_TAIL = 20_000, 8_000

_COMMAND_KEYS = ("command", "cmd", "script")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "target_file", "notebook_path")
_EXIT_RE = re.compile(
    r"(?i)\b(?:exit(?:ed)?(?:\s+with)?(?:\s+code|\s+status)?|return\s*code|returncode|exit_code|status\s+code)"
    r"[\s:=\"']{0,4}(-?\d{1,3})\b"
)

_URL_RE = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_EXTENSIONS = (
    "py|pyi|js|jsx|ts|tsx|mjs|cjs|json|jsonl|ya?ml|toml|ini|cfg|conf|md|rst|txt|csv|tsv|log|sh|bash|zsh|ps1|"
    "c|h|cc|cpp|hpp|cs|go|rs|java|kt|swift|rb|php|pl|lua|sql|html?|css|scss|vue|svelte|xml|lock|env|"
    "dockerfile|mk|gradle|proto|ipynb|patch|diff|service|timer|socket|deb|rpm|tar|gz|tgz|zip|so|dll|exe|iso|img"
)
_EXTENSION_SET = frozenset(_EXTENSIONS.replace("ya?ml", "yml|yaml").replace("html?", "htm|html").split("|"))
# A whole token that is an absolute/relative path of 2+ segments, or a name with a known extension.
_PATH_RE = re.compile(
    rf"(?:(?:~|\.{{1,2}})?/(?:[\w.+@-]+/)*[\w.+@-]+(?:/[\w.+@-]+)+/?"     # /usr/bin/env, ./a/b, ~/x/y
    rf"|(?:[\w.+@-]+/)+[\w.+@-]+\.(?:{_EXTENSIONS})"                  # src/app.py
    rf"|~?/[\w.+@-]+\.(?:{_EXTENSIONS})"                              # /etc.conf
    rf"|[\w+@-][\w.+@-]*\.(?:{_EXTENSIONS}))",                        # config.py
    re.I,
)
_TOKEN_EDGES = "'\"`()<>[]{},;:|=*!?"
# A pattern opening with a lookbehind or ``\b`` is tried at every position of the text; a leading lookahead
# of the characters a match can start with lets the regex engine skip the others in C (2× faster overall).
_HEX_RE = re.compile(r"\b[0-9a-f]{7,40}\b")  # with a digit and a letter (checked after: lookaheads are slow)
# Only text holding this can hold a UUID; it opens with a literal, so the check is a fast C scan.
_UUID_HINT_RE = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_ISSUE_RE = re.compile(r"(?i)(?=[pitbm#])(?:\b(?:PR|pull request|issue|ticket|bug|MR)\s*#?\s*\d{1,7}\b|(?<![\w&#])#\d{2,7}\b)")
_VERSION_RE = re.compile(r"(?=[v\d])(?:(?<![\w.])v?\d+\.\d+(?:\.\d+)+(?:[-+][\w.]+)?\b|\bv\d+\.\d+\b)")
# Codes such as booking references (ZFA04Y), tickets (OPS-1234), user ids (mia_li_3668).
_CODE_RE = re.compile(
    r"\b(?:[A-Z0-9]{5,12}"
    r"|[A-Z][A-Z0-9]{1,9}-\d{1,7}"
    r"|[a-z]+(?:_[a-z]+)+_\d{3,})\b"
)
_UNITS = (
    r"ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|"
    r"[KMGTP]i?B|[KMGT]b|bytes?|B|kbps|Mbps|Gbps|Hz|kHz|MHz|GHz|%|px|pt|em|rem|dpi|fps|rps|qps|"
    r"req/s|ops/s|tokens?|lines?|files?|rows?|records?|items?|users?|requests?|cores?|threads?|"
    r"°C|°F|C|F|kg|g|mg|km|m|cm|mm|mi|ft|in|V|W|kW|mAh|"
    r"USD|EUR|GBP|CNY|RMB|JPY|dollars?|euros?|"
    r"秒|毫秒|分钟|小时|天|周|个月|年|元|块|美元|欧元|个|次|行|条|人|台|核|倍"
)
_NUMBER_RE = re.compile(
    rf"(?=[$€£¥\d])(?:[$€£¥]\s?\d[\d,]*(?:\.\d+)?\b"
    rf"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:{_UNITS})(?![A-Za-z]))"
)
# Test-runner progress ("[ 30%]") is not a measurement.
_PROGRESS_RE = re.compile(r"\[\s*\d{1,3}%\]")
# The exception/failure line itself; a "Traceback (most recent call last)" header is not one.
_ERROR_RE = re.compile(
    r"^\s*(?:E\s+)?(?:"
    r"(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\b(?::|$|\s*\()"
    r"|(?:error|fatal|panic|FATAL|ERROR|Error)(?:\[\w+\])?:\s"
    r"|FAILED\s|npm ERR!|E:\s|Segmentation fault|command not found|No such file or directory"
    r"|.*?:\s(?:command not found|No such file or directory|Permission denied)$"
    r")"
)

# Cheap literal checks before the costlier scans: no cue word, no rule; no error word, no error line.
_CUES = ("must", "never", "always", "don't", "do not", "dont", "prefer", "only", "avoid", "make sure", "shall",
         "should", "必须", "务必", "一定", "不", "禁止", "请勿", "千万", "永远", "始终", "只", "别", "优先", "喜欢",
         "偏好", "宁可", "一律")
_CUE_RE = re.compile("|".join(map(re.escape, _CUES)))  # one scan of the lower-cased text
_MAX_ERROR_LINES = 400
_ISSUE_WORDS = ("PR", "pull request", "issue", "Issue", "ticket", "Ticket", "bug", "Bug", "MR")
_ERROR_WORDS = ("Error", "Exception", "error", "ERROR", "FAIL", "fatal", "FATAL", "panic", "ERR!", "E:",
                "Exit", "Interrupt", "Failure", "Fault", "fault", "not found", "No such file", "Permission denied")
_ERROR_WORD_RE = re.compile("|".join(map(re.escape, _ERROR_WORDS)))

# --- constraints ---------------------------------------------------------------------------------------

_SENTENCE_RE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_EN_RULE = re.compile(
    r"(?ix)"
    r"(?:^|\b(?:please|pls|you|we|i|they|it|this|that|everything|everyone|nobody|the\s+\w+)\s+)"
    r"(?:"
    r"(?:must|mustn't|must\s+not|shall\s+not|should\s+never|should\s+always|should\s+not|shouldn't)\b"
    r"|(?:always|never)\s+(?!mind\b|heard\b|seen\b|knew\b|thought\b|been\b|had\b|was\b|were\b|did\b|got\b"
    r"|really\b|ever\b|again\b|before\b|once\b|in\b|the\b|a\b)\w+"
    r"|(?:don't|do\s+not|dont)\s+(?!know\b|think\b|understand\b|care\b|remember\b|see\b|get\b|have\b|mind\b"
    r"|worry\b|bother\b|believe\b|recall\b|mean\b|quite\b|really\b|even\b)\w+"
    r"|(?:only)\s+(?:use|answer|reply|respond|write|output|return|run|touch|edit|modify|change|commit|deploy|"
    r"push|call|speak|talk|ever)\b"
    r"|(?:prefer|would\s+prefer|'d\s+prefer)\b"
    r"|make\s+sure\b|avoid\b"
    r")"
)
# "I must say", "I must admit": opinions, not rules.
_EN_NOT_RULE = re.compile(
    r"(?i)\b(?:must\s+(?:say|admit|confess|have|'ve|be\s+(?:kidding|joking|nice|fun|great|hard|tough)|"
    r"be\s+(?:a|an|the|some|my|your|his|her|that|this)\b)|never\s+mind|nevermind|i\s+never\b|"
    r"i\s+always\s+(?:forget|forgot|wonder|wondered|thought|liked|loved|hated|get|got|had|was|knew)\b|"
    r"i\s+(?:don't|do\s+not)\s+(?:know|think|understand|care|remember|see|get))"
)
_ZH_RULE = re.compile(r"必须|务必|一定|不要|不许|不准|不能|禁止|请勿|千万|永远|始终|只能|只用|只回答|只说|只写|只改|只在|别|优先|更喜欢|偏好|宁可|一律")
# Compounds in which those characters are not a rule: 别人 (others), 只是 (just), 不要紧 (never mind), …
_ZH_NOT_RULE = re.compile(
    r"别人|别的|别处|区别|特别|分别|类别|级别|告别|识别|差别|性别|个别|不要紧|不一定|一定是|一定会|说不定|"
    r"永远不会|我不能|不能说|不能确定|要不要|能不能|可不可以"
)


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


def _is_constraint(sentence: str) -> bool:
    text = sentence.strip()
    if not text or text.endswith(("?", "？")):
        return False
    if _ZH_RULE.search(text):
        cleaned = _ZH_NOT_RULE.sub("", text)
        if _ZH_RULE.search(cleaned):
            return True
    return bool(_EN_RULE.search(text)) and not _EN_NOT_RULE.search(text)


def extract_constraints(text: str) -> list[str]:
    """The sentences of ``text`` that state a rule or preference (English or Chinese cues), in order."""
    found: list[str] = []
    for sentence in _SENTENCE_RE.findall(text):
        # A speaker tag ("[Ann] never push on Fridays") is not part of the rule's frame.
        body = re.sub(r"^\s*\[[^\]]{1,60}\]\s*", "", sentence).strip()
        if len(body) >= 6 and _is_constraint(body):
            found.append(body)
    return found


def _mixed(token: str) -> bool:
    """Letters and digits both (a hash or a code, not a word or a plain number)."""
    if token.isascii() and token.isalnum():  # the common case, decided by C-level scans
        return not token.isdigit() and not token.isalpha()
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _ids(text: str) -> Iterator[str]:
    if _UUID_HINT_RE.search(text):
        yield from _UUID_RE.findall(text)
    yield from (h for h in _HEX_RE.findall(text) if _mixed(h))
    if "#" in text or any(word in text for word in _ISSUE_WORDS):
        yield from (m.group(0) for m in _ISSUE_RE.finditer(text))
    if "." in text:
        yield from (m.group(0) for m in _VERSION_RE.finditer(text))
    yield from (c for c in _CODE_RE.findall(text) if "_" in c or "-" in c or _mixed(c))


def _paths(text: str) -> Iterator[str]:
    # Token by token: one regex over the whole text backtracks at every position (10× slower).
    for token in text.split():
        if "/" not in token and "." not in token:
            continue
        if "://" in token:
            continue
        # "src/app.py:42:" (grep, tracebacks) and "tests/x.py::test_y" (pytest) name the file before the colon.
        path = token.strip(_TOKEN_EDGES).split(":", 1)[0].rstrip(".,;")
        if "/" not in path and path.rsplit(".", 1)[-1].lower() not in _EXTENSION_SET:
            continue
        # A bare "1.5" style version or "e.g" is not a file; a path has a letter in its last segment.
        if _PATH_RE.fullmatch(path) and any(c.isalpha() for c in path.rsplit("/", 1)[-1]):
            yield path


def _errors(text: str) -> Iterator[str]:
    """Error lines in text order; only lines holding an error word are tried (``str.find`` is fast, a
    line-by-line regex over a long log is not)."""
    if _ERROR_WORD_RE.search(text) is None:  # most messages: one scan instead of one per word
        return
    starts: dict[int, str] = {}
    for word in _ERROR_WORDS:
        at = text.find(word)
        while at >= 0 and len(starts) < _MAX_ERROR_LINES:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if start not in starts:
                line = text[start:end]
                starts[start] = line.strip() if _ERROR_RE.match(line) else ""
            at = text.find(word, end)
    yield from (line for _, line in sorted(starts.items()) if line)


def _text_facts(text: str, user: bool, values: bool) -> Iterator[tuple[str, str]]:
    text = _scanned(text)
    lowered = text.lower() if user else ""
    if user and _CUE_RE.search(lowered):
        yield from (("constraint", s) for s in extract_constraints(text))
    yield from (("error", e) for e in _errors(text))
    if not values:
        return
    if "http" in text:
        yield from (("url", u.rstrip(".,:;")) for u in _URL_RE.findall(text))
    yield from (("path", p) for p in _paths(text))
    yield from (("id", i) for i in _ids(text))
    yield from (("number", n.group(0)) for n in _NUMBER_RE.finditer(_PROGRESS_RE.sub(" ", text)))


def _exit_note(result: str | None) -> str:
    if result is None:
        return "no result recorded"
    match = _EXIT_RE.search(result)
    if match:
        return f"exit {match.group(1)}"
    return "failed" if any(_ERROR_RE.match(line) for line in result.splitlines()[-20:]) else "ran"


def _call_facts(call: Mapping[str, Any], result: str | None) -> Iterator[tuple[str, str]]:
    args = call_arguments(call)
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            yield "command", f"{_clip(value, 'command')} → {_exit_note(result)}"
            break
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip() and "\n" not in value:
            yield "path", value.strip()
    for value in args.values():
        if isinstance(value, str):
            yield from (("url", u.rstrip(".,:;")) for u in _URL_RE.findall(value[:_SCAN_HEAD]))


def facts_of_message(message: Message, seq: int, results: Mapping[str, str] | None = None, *,
                     values: bool = True, redacted: dict[str, str] | None = None) -> list[Fact]:
    """The facts of one message, ``seq`` being its number; ``results`` maps tool-call ids to their result
    text (for the exit status of a command). ``values=False`` skips the costly scan of the text for paths,
    URLs, ids and numbers (rules, errors and the calls' commands and paths are still taken). ``redacted``
    remembers redactions across calls (a path or an id recurs in many messages). A handoff summary or a
    system prompt gives none."""
    role = message.get("role")
    text = content_text(message)
    if role == "system" or is_summary_text(text):
        return []
    pairs: list[tuple[str, str]] = []
    for call in tool_calls_of(message):
        pairs.extend(_call_facts(call, (results or {}).get(str(call.get("id")))))
    pairs.extend(_text_facts(text, role == "user", values))
    counts: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    facts: list[Fact] = []
    memo = {} if redacted is None else redacted
    for kind, raw in pairs:
        clean = memo.get(raw)
        if clean is None:
            clean = memo[raw] = redact_secrets(raw)
        clean = _clip(clean, kind)
        if not clean or (kind, clean) in seen or counts.get(kind, 0) >= _PER_MESSAGE[kind]:
            continue
        seen.add((kind, clean))
        counts[kind] = counts.get(kind, 0) + 1
        facts.append(Fact(kind, clean, seq))
    return facts


def extract_facts(messages: Sequence[Message], number: Callable[[int], int], *,
                  scan_chars: int | None = None) -> list[Fact]:
    """Every fact of ``messages`` in message order, each once (the newest occurrence wins).

    ``number(i)`` is the message number of ``messages[i]`` (the store's sequence, or a position). With
    ``scan_chars``, only the newest messages, that many characters of their text, are scanned for paths,
    URLs, ids and numbers (the costly scan): a bounded ledger keeps the newest facts anyway. Rules, errors
    and the calls' commands and paths are taken from every message.
    """
    results = {str(m.get("tool_call_id")): content_text(m) for m in messages if m.get("role") == "tool"}
    newest: dict[tuple[str, str], Fact] = {}
    redacted: dict[str, str] = {}
    scanned = 0
    for i in range(len(messages) - 1, -1, -1):
        values = scan_chars is None or scanned < scan_chars
        if values and scan_chars is not None:
            scanned += min(len(content_text(messages[i])), _SCAN_HEAD + _SCAN_TAIL)
        for fact in facts_of_message(messages[i], number(i), results, values=values, redacted=redacted):
            newest.setdefault((fact.kind, fact.text), fact)
    return sorted(newest.values(), key=lambda f: f.seq)
