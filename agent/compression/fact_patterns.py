"""The evidence extractor's patterns: one table, `SCANNERS`, lists every finder of facts in a text with its gate.

A finder yields raw facts of one kind from a text, with the exact Python patterns below. Its **gate** is a
byte pattern that must occur somewhere in the text's UTF-8 encoding whenever the finder can yield anything
(`fact_scan` finds which gates occur, all of them in one pass, and only those finders run). A gate is the
finder's pattern made looser, never stricter — lookarounds and ``\\b`` dropped, ``{m,n}`` read as ``{m}``, and
every class that matches non-ASCII characters in Python (``\\d``, ``\\s``, case-insensitive letters) widened to
any non-ASCII byte — so a gate can only let a finder run for nothing, never skip a fact. ``None``: always
run. A finder keeps its own cheap check (a literal or a short regex), so without the one-pass scan (no
hyperscan) every finder runs exactly as it did before the gates. Adding a kind of fact: add its finder and gate here, in the order
its facts should come; the tests hold every gate to its finder on generated text and on the corpus.

Patterns favour precision over recall — a ledger full of prose fragments would cost tokens and trust — so a
constraint needs a deontic cue in an imperative or first/second-person frame ("never push to main", "you
must use UTC", "我们必须用 UTC", "不要改这个文件"), at a sentence's start or in passing, after a comma or a
conjunction ("fix it, but don't touch the migrations"), and idioms such as "I must say", "never mind",
"don't know", "别人", "只是" are not rules (an idiom rules out its own cue, not a rule later in the sentence).
An error line is the failure itself, whole: an exception line or a traceback's last line, a failing test,
a compiler's or a tool's error, a system message pasted into a line, the message of a result marked failed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["ERROR_RE", "SCANNERS", "STAGES", "URL_RE", "Scanner", "caseless", "command_paths", "extract_constraints", "literals"]

URL_RE = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_EXTENSIONS = (
    "py|pyi|js|jsx|ts|tsx|mjs|cjs|json|jsonl|ya?ml|toml|ini|cfg|conf|md|rst|txt|csv|tsv|log|sh|bash|zsh|ps1|"
    "c|h|cc|cpp|hpp|cs|go|rs|java|kt|swift|rb|php|pl|lua|sql|html?|css|scss|vue|svelte|xml|lock|env|"
    "dockerfile|mk|gradle|proto|ipynb|patch|diff|service|timer|socket|deb|rpm|tar|gz|tgz|zip|so|dll|exe|iso|img|"
    "o|a|cu|cuh|out|bin|whl|egg|jar|tmp|bak|orig|rej|pyc|db|sqlite|pem|crt|png|jpe?g|gif|svg|pdf|mp3|mp4|cab|bz2|xz|pyx|pxd|tex|bib"
)
_EXTENSION_SET = frozenset(_EXTENSIONS.replace("ya?ml", "yml|yaml").replace("html?", "htm|html")
                           .replace("jpe?g", "jpg|jpeg").split("|"))
# A whole token that is an absolute/relative path of 2+ segments, or a name with a known extension.
_PATH_RE = re.compile(
    # Segments taken whole (a segment is followed only by "/" or the end): `(?:seg/)*seg(?:/seg)+` tried every
    # way of splitting a long path between its two loops, seconds for a path of a few thousand segments.
    rf"(?:(?:~|\.{{1,2}})?/[\w.+@-]++(?:/[\w.+@-]++)++/?"                 # /usr/bin/env, ./a/b, ~/x/y
    rf"|(?:~|\.{{1,2}})/[\w.+@-]+/?"                                     # ./configure, ~/.bashrc
    rf"|(?:[\w.+@-]+/)+[\w.+@-]+\.(?:{_EXTENSIONS})"                  # src/app.py
    rf"|~?/[\w.+@-]+\.(?:{_EXTENSIONS})"                              # /etc.conf
    rf"|[\w+@-][\w.+@-]*\.(?:{_EXTENSIONS}))",                        # config.py
    re.I,
)
_TOKEN_EDGES = "'\"`()<>[]{},;:|=*!?"
# What `_folders` reads: "name/", "a/b/" or "/name/", "/name", "a/b/c" and longer (a segment as in _PATH_RE).
_FOLDER_RE = re.compile(r"(?:[\w.+@-]+/)+|/[\w.+@-]+/?|[\w.+@-]+(?:/[\w.+@-]+){2,}/?")
# A pattern opening with a lookbehind or ``\b`` is tried at every position of the text; a leading lookahead
# of the characters a match can start with lets the regex engine skip the others in C (2× faster overall).
_HEX_RE = re.compile(r"\b[0-9a-f]{7,40}\b")  # with a digit and a letter (checked after: lookaheads are slow)
# Only text holding this can hold a UUID; it opens with a literal, so the check is a fast C scan.
_UUID_HINT_RE = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_ISSUE_RE = re.compile(r"(?i)(?=[pitbm#])(?:\b(?:PR|pull request|issue|ticket|bug|MR)\s*+(?:#\s*+)?\d{1,7}\b|(?<![\w&#])#\d{2,7}\b)")
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
# A measure takes its run of digits and commas whole: a unit never starts with a digit, a comma, "." or a blank.
_MEASURE = rf"\d[\d,]*+(?:\.\d++)?+\s?+(?:{_UNITS})(?![A-Za-z])"
# Amounts of money and measures, each found as a group, in text order. A measure starting anywhere in a run of digits
# and commas reads the run to its end and needs the same unit after it, so it is tried only where the run's first one
# can start: at the run's start, else after its first commas (a word or "." comes before the run); and after an amount
# that ends inside a run, where the first one in the rest of the run can. Tried at every digit, as before, a JSON
# array of ints took time quadratic in its length: 4.5 s for 8,000 characters, 32 s for 28,000.
_NUMBER_RE = re.compile(
    rf"(?=[$€£¥\d,])(?:(?P<amount>[$€£¥]\s?\d[\d,]*(?:\.\d+)?\b)(?:,*+(?P<then>{_MEASURE}))?"
    rf"|(?<![\d,])(?:(?<![\w.])|\d*+,++)(?P<measure>{_MEASURE}))"
)
# Test-runner progress ("[ 30%]") is not a measurement.
_PROGRESS_RE = re.compile(r"\[\s*\d{1,3}%\]")
# The rest of a compiler's "src/a.c:3:1: error: " from its first ":". The lazy branch below tries it after a character
# that is not a digit, or after a run of digits taken from its first digit, but not after a run right after "x:" (the
# start before it read that run already). Tried at every digit before a ":" of "1:2:3:…", each read the rest of the
# chain: 10 s for a line of 32,000 characters.
_AT_ERROR = r":(?:\d++:)*+\s(?:fatal\s)?error:\s"
# The exception/failure line itself; a "Traceback (most recent call last)" header is not one.
ERROR_RE = re.compile(
    # The margin is taken whole: given back a blank at a time, each shorter margin sent the lazy branch over the whole
    # line again, 35 s for a line of 32,000 blanks. Only " ... FAIL" can start on the margin's last blank; it is
    # read after the margin instead.
    r"^\s*+(?:E\s++)?+(?:"
    r"(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\b(?::|$|\s*\()"
    r"|(?:error|fatal|panic|FATAL|ERROR|Error)(?:\[\w+\])?:\s"
    r"|(?:Error|ERROR|error)\s[^:\n]{1,50}:\s"                         # "Error fetching result: …"
    r"|FAILED\s|FAIL:\s|ERROR\s+\S+::|--- FAIL:\s|npm ERR!|E:\s"      # test runners' failing tests, npm, apt
    # Further into the line (one lazy pass tries them all): a compiler's or a tool's "src/a.c:3:1: error: …",
    # "dpkg: error: …"; unittest -v's "test_x (m.C) ... FAIL"; the C library's and the shell's messages,
    # wherever a line holds them (a user pastes them into a sentence).
    rf"|.*?(?:[^\s\d]{_AT_ERROR}|\d(?<!\d\d)(?<!\S:\d)\d*+{_AT_ERROR}|\s\.\.\.\s(?:FAIL|ERROR)$"
    r"|command not found|No such file or directory|No such device|Permission denied|Segmentation fault)"
    r"|(?<=\s)\.\.\.\s(?:FAIL|ERROR)$"
    r")"
)
# A Python traceback ends with its exception at the margin, whatever the exception's name.
_TRACEBACK = "Traceback (most recent call last)"
_TRACEBACK_SKIP = ("During handling of the above exception", "The above exception was the direct cause")
# A tool result the platform marked as failed (Claude Code's is_error): its first line says why.
_FAILED_RESULT_MARK = "[error]"

# A command a chat user types on a line of its own: after a shell prompt ("$ ls -la") or starting with sudo,
# maybe after the nick it is addressed to ("bob: sudo apt-get install samba"); "sudo is …" is talk about sudo.
_TYPED_COMMAND_RE = re.compile(
    r"(?m)^[ \t]*(?:[^\s:,]{1,32}[:,][ \t]+)?"
    r"(?P<command>\$[ \t]+[a-z./~][^\n]*"
    r"|sudo[ \t]+(?!(?:or|and|is|it|the|a|to|for|if|not|will|can|should|works|only|again|access|rights)\b)"
    r"[a-z./~-][^\n]*)"
)

# Cheap literal checks before the costlier scans: no cue word, no rule; no error word, no error line.
_CUES = ("must", "never", "always", "don't", "don’t", "do not", "dont", "prefer", "only", "avoid", "make sure", "shall",
         "should", "be sure", "remember to", "rather", "必须", "务必", "一定", "不", "禁止", "请勿", "千万", "永远", "始终", "只", "别", "优先", "喜欢",
         "偏好", "宁可", "一律")
_CUE_RE = re.compile("|".join(map(re.escape, _CUES)))  # one scan of the lower-cased text
_MAX_ERROR_LINES = 400
_ISSUE_WORDS = ("PR", "pull request", "issue", "Issue", "ticket", "Ticket", "bug", "Bug", "MR")
_ERROR_WORDS = ("Error", "Exception", "error", "ERROR", "FAIL", "fatal", "FATAL", "panic", "ERR!", "E:",
                "Exit", "Interrupt", "Failure", "Fault", "fault", "not found", "No such", "Permission denied",
                "Traceback")
_ERROR_WORD_RE = re.compile("|".join(map(re.escape, _ERROR_WORDS)))

# --- constraints ---------------------------------------------------------------------------------------

# A sentence ends at . ! ? followed by a space or the end, not inside "127.0.0.1", "a.py" or a URL.
# (Runs of plain characters as one step: a step per character is five times slower; the pattern cannot fail once
# it has begun, so the runs never backtrack.)
_SENTENCE_RE = re.compile(r"(?:[^.!?。！？\n]+|[.!?](?=[^\s.!?]))+[.!?。！？]*")
_EN_RULE = re.compile(
    r"(?ix)"
    # At the sentence's start, after a subject, or in passing: after a comma, a dash or a conjunction.
    r"(?:^|[,;:(\u2013\u2014-]\s*"
    r"|\b(?:please|pls|you|we|i|they|it|this|that|everything|everyone|nobody|the\s+\w+|and|but|so|then|also"
    r"|just|or)\s+"
    r"|\b(?:i|we)(?=['’]d\s))"
    r"(?:"
    r"(?:must|mustn['’]t|must\s+not|shall\s+not|should\s+never|should\s+always|should\s+not|shouldn['’]t)\b"
    r"|(?:always|never)\s+(?!mind\b|heard\b|seen\b|knew\b|thought\b|been\b|had\b|was\b|were\b|did\b|got\b"
    r"|really\b|ever\b|again\b|before\b|once\b|in\b|the\b|a\b)\w+"
    r"|(?:don['’]t|do\s+not|dont)\s+(?!know\b|think\b|understand\b|care\b|remember\b|see\b|get\b|have\b"
    r"|mind\b|worry\b|believe\b|recall\b|mean\b|quite\b|really\b|even\b)\w+"
    r"|(?:only)\s+(?:use|answer|reply|respond|write|output|return|run|touch|edit|modify|change|commit|deploy|"
    r"push|call|speak|talk|ever)\b"
    r"|(?:prefer|(?:would|['’]d)\s+(?:much\s+)?(?:prefer|rather))\b"
    r"|make\s+sure\b|be\s+sure\b|remember\s+to\b|avoid\b"
    r")"
)
# "I must say", "I must admit": opinions, not rules.
_EN_NOT_RULE = re.compile(
    r"(?i)\b(?:must\s+(?:say|admit|confess|have|'ve|be\s+(?:kidding|joking|nice|fun|great|hard|tough)|"
    r"be\s+(?:a|an|the|some|my|your|his|her|that|this)\b)|never\s+mind|nevermind|i\s+never\b|"
    r"i\s+always\s+(?:forget|forgot|wonder|wondered|thought|liked|loved|hated|get|got|had|was|knew)\b|"
    r"i\s+(?:don['’]t|do\s+not)\s+(?:know|think|understand|care|remember|see|get))"
)
# Every rule `_EN_RULE` finds holds one of these words, its cue. In ASCII text no character but an ASCII letter
# reads as one under re.IGNORECASE, so lower-casing finds them all: a sentence with none is not tried (most sentences
# of a text with a cue word elsewhere; the rule patterns cost more than the whole check).
_ASCII_CUE_RE = re.compile(r"must|shall|should|always|never|don't|do\s+not|dont|only|prefer|rather|make\s+sure"
                           r"|be\s+sure|remember\s+to|avoid")
_ZH_RULE = re.compile(r"必须|务必|一定|不要|不许|不准|不能|禁止|请勿|千万|永远|始终|只能|只用|只回答|只说|只写|只改|只在|别|优先|更喜欢|偏好|宁可|一律")
# Compounds in which those characters are not a rule: 别人 (others), 只是 (just), 不要紧 (never mind), …
_ZH_NOT_RULE = re.compile(
    r"别人|别的|别处|区别|特别|分别|类别|级别|告别|识别|差别|性别|个别|不要紧|不一定|一定是|一定会|说不定|"
    r"永远不会|我不能|不能说|不能确定|要不要|能不能|可不可以"
)


def _is_constraint(sentence: str) -> bool:
    text = sentence.strip()
    if not text or text.endswith(("?", "？")):
        return False
    if text.isascii() and _ASCII_CUE_RE.search(text.lower()) is None:
        return False  # (no cue word; nor, in ASCII, a Chinese rule)
    if _ZH_RULE.search(text):
        cleaned = _ZH_NOT_RULE.sub("", text)
        if _ZH_RULE.search(cleaned):
            return True
    rules = _EN_RULE.finditer(text)
    first = next(rules, None)
    if first is None:  # (most sentences with a cue word: the idioms are then not looked for)
        return False
    # An idiom ("I don't know", "never mind") rules out only the cue it holds, not a rule later in the sentence.
    idioms = [m.span() for m in _EN_NOT_RULE.finditer(text)]
    return any(not any(m.start() < end and start < m.end() for start, end in idioms)
               for m in itertools.chain((first,), rules))


def extract_constraints(text: str) -> list[str]:
    """The sentences of ``text`` that state a rule or preference (English or Chinese cues), in order."""
    found: list[str] = []
    for sentence in _SENTENCE_RE.findall(text):
        # A speaker tag ("[Ann] never push on Fridays") is not part of the rule's frame.
        body = re.sub(r"^\s*\[[^\]]{1,60}\]\s*", "", sentence).strip()
        if len(body) >= 6 and _is_constraint(body):
            found.append(body)
    return found


# --- finders: text → raw facts of one kind, in text order -----------------------------------------------


def _constraints(text: str) -> Iterator[str]:
    if _CUE_RE.search(text.lower()):
        yield from extract_constraints(text)


def _traceback_ends(text: str, starts: dict[int, str]) -> None:
    """Add each Python traceback's last line (its exception, at the margin after the indented frames) to
    ``starts`` (line start → line)."""
    at = text.find(_TRACEBACK)
    while at >= 0 and len(starts) < _MAX_ERROR_LINES:
        start = text.find("\n", at) + 1
        while 0 < start < len(text):
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            line = text[start:end]
            if line.strip() and not line[:1].isspace() and not line.startswith(("^", "~")):
                if not line.startswith(_TRACEBACK_SKIP):
                    starts[start] = line.strip()
                break
            start = end + 1
        at = text.find(_TRACEBACK, at + len(_TRACEBACK))


def _errors(text: str) -> Iterator[str]:
    """Error lines in text order; only lines holding an error word are tried (``str.find`` is fast, a
    line-by-line regex over a long log is not)."""
    if _ERROR_WORD_RE.search(text) is None:  # the fallback's gate: one scan instead of one per word
        return
    starts: dict[int, str] = {}
    if text.startswith(_FAILED_RESULT_MARK + "\n"):
        first = len(_FAILED_RESULT_MARK) + 1
        while first < len(text) and text[first] == "\n":
            first += 1
        end = text.find("\n", first)
        starts[first] = text[first : len(text) if end < 0 else end].strip()
    if _TRACEBACK in text:
        _traceback_ends(text, starts)
    for word in _ERROR_WORDS:
        at = text.find(word)
        while at >= 0 and len(starts) < _MAX_ERROR_LINES:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if start not in starts:
                line = text[start:end]
                starts[start] = line.strip() if ERROR_RE.match(line) else ""
            at = text.find(word, end)
    yield from (line for _, line in sorted(starts.items()) if line)


def _typed_commands(text: str) -> Iterator[str]:
    if "sudo" in text or "$" in text:
        for match in _TYPED_COMMAND_RE.finditer(text):
            command = match.group("command").removeprefix("$").strip()
            if " " in command and not command.endswith("?"):
                yield command


def _urls(text: str) -> Iterator[str]:
    if "http" in text:
        yield from (u.rstrip(".,:;") for u in URL_RE.findall(text))


def _path_token(token: str) -> str:
    """The path a whitespace-separated token may hold: quotes, brackets and trailing punctuation cut off, and a
    line number or a test id after a colon ("src/app.py:42:" in grep output and tracebacks, "tests/x.py::test_y"
    in pytest's) — so "`src/a.py`." gives "src/a.py"."""
    path = token.lstrip(_TOKEN_EDGES).rstrip(_TOKEN_EDGES + ".,;").split(":", 1)[0]
    return path.rstrip(_TOKEN_EDGES + ".,;")


def _paths(text: str) -> Iterator[str]:
    # Token by token: one regex over the whole text backtracks at every position (10× slower).
    for token in text.split():
        if "/" not in token and "." not in token:
            continue
        if "://" in token:
            continue
        path = _path_token(token)
        if "/" not in path and path.rsplit(".", 1)[-1].lower() not in _EXTENSION_SET:
            continue
        # A bare "1.5" style version or "e.g" is not a file; a path has a letter in its last segment.
        if _PATH_RE.fullmatch(path) and any(c.isalpha() for c in path.rstrip("/").rsplit("/", 1)[-1]):
            yield path


def _folders(text: str) -> Iterator[str]:
    """Paths without a known extension that `_paths` leaves: a folder written with its trailing slash
    ("build/", "src/_pytest/", "/testbed/"), a lone absolute name ("/testbed"), a relative path of three or more
    segments ("src/_pytest/mark", "build/test/style") — in what tools and the agent write (a chat user's
    "sata/scsi/etc" lists alternatives)."""
    for token in text.split():
        if "/" not in token or "://" in token:
            continue
        path = _path_token(token)
        segments = path.strip("/").split("/")
        if len(segments) == 1 and any(c in token for c in "<>'\""):
            continue  # a closing tag, "</output>", or a quoted sed or grep pattern, "'/def"
        if (_FOLDER_RE.fullmatch(path) and not _PATH_RE.fullmatch(path)
                and all(any(c.isalnum() for c in segment) for segment in segments)
                and any(c.isalpha() for c in segments[-1]) and (len(segments) > 1 or len(segments[0]) > 1)):
            yield path


def command_paths(command: str) -> Iterator[str]:
    """The paths a shell command names, in order, token by token: files (`_paths`), and folders (`_folders`)
    in an unquoted word with a slash before its last character — a quoted one or "name/" is more often a sed
    or grep pattern ('/def', 's/NotImplemented/…') than a folder."""
    for token in command.split():
        yield from _paths(token)
        if "/" in token.rstrip("/") and "'" not in token and '"' not in token:
            yield from _folders(token)


def _mixed(token: str) -> bool:
    """Letters and digits both (a hash or a code, not a word or a plain number)."""
    if token.isascii() and token.isalnum():  # the common case, decided by C-level scans
        return not token.isdigit() and not token.isalpha()
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _uuids(text: str) -> Iterator[str]:
    if _UUID_HINT_RE.search(text):
        yield from _UUID_RE.findall(text)


def _hashes(text: str) -> Iterator[str]:
    yield from (h for h in _HEX_RE.findall(text) if _mixed(h))


def _issues(text: str) -> Iterator[str]:
    if "#" in text or any(word in text for word in _ISSUE_WORDS):
        yield from (m.group(0) for m in _ISSUE_RE.finditer(text))


def _versions(text: str) -> Iterator[str]:
    if "." in text:
        yield from (m.group(0) for m in _VERSION_RE.finditer(text))


def _codes(text: str) -> Iterator[str]:
    yield from (c for c in _CODE_RE.findall(text) if "_" in c or "-" in c or _mixed(c))


def _numbers(text: str) -> Iterator[str]:
    for match in _NUMBER_RE.finditer(_PROGRESS_RE.sub(" ", text)):
        yield from filter(None, match.groups())


# --- gates: byte patterns over the UTF-8 text (see the module docstring) --------------------------------

# Python's case-insensitive ASCII letters also match these (re's documentation names exactly four), and
# str.lower() turns the Kelvin sign into "k".
_CASE_TWINS = {"i": ("İ", "ı"), "s": ("ſ",), "k": ("\u212a",)}
# A character \d matches: an ASCII digit, or (any other Unicode digit) a non-ASCII byte.
_DIGIT = rb"[0-9\x80-\xff]"
# What \s matches: ASCII whitespace, the information separators, or (a Unicode space) non-ASCII bytes.
_SPACE = rb"[\t\n\v\f\r \x1c-\x1f\x80-\xff]"
# What [\w.+@-] (a path segment's character) matches.
_SEGMENT = rb"[A-Za-z0-9_.+@\x80-\xff-]"


def literals(words: tuple[str, ...]) -> bytes:
    """A gate for "one of ``words`` occurs", case-sensitive."""
    return b"|".join(re.escape(word).encode() for word in words)


def caseless(word: str) -> bytes:
    """A gate for ``word`` as a case-insensitive Python pattern (or a ``.lower()`` comparison) matches it."""
    out = []
    for char in word:
        if char.isascii() and char.isalpha():
            twins = [re.escape(c).encode() for c in sorted({char.lower(), char.upper()})]
            twins += [twin.encode() for twin in _CASE_TWINS.get(char.lower(), ())]
            out.append(b"(?:" + b"|".join(twins) + b")")
        else:
            out.append(re.escape(char).encode())
    return b"".join(out)


_GATE_UNITS = _UNITS.encode()
_GATE_EXTENSIONS = b"|".join(caseless(ext) for ext in sorted(_EXTENSION_SET))


# A message's facts are found in these stages, each only when a compaction reads that far back (`Scanner.stage`).
STAGES = ("first", "path", "value")


@dataclass(frozen=True, slots=True)
class Scanner:
    """One finder of facts in a text: the ``kind`` it yields, its ``gate`` (None: no gate), and which texts
    it reads (``user_only``: rules come from what the user said; ``not_user``: what only tools and the agent write
    reads as a fact) and how far back a compaction reads with it (``stage``: "first" in every message; "path"
    and then "value", the costly kinds, only in its newest messages, paths further back than the rest)."""

    name: str
    kind: str
    gate: bytes | None
    find: Callable[[str], Iterator[str]]
    user_only: bool = False
    stage: str = "value"
    not_user: bool = False


# In the order their facts come, stage by stage (a message's facts are capped per kind, first come first kept).
SCANNERS: tuple[Scanner, ...] = (
    Scanner("constraint", "constraint", b"|".join(caseless(cue) for cue in _CUES), _constraints, user_only=True,
            stage="first"),
    Scanner("error", "error", literals(_ERROR_WORDS), _errors, stage="first"),
    Scanner("typed_command", "command", rb"sudo|\$", _typed_commands, user_only=True, stage="first"),
    # Two segments after a slash, "./" or "~/" and a segment, or a known extension.
    Scanner("path", "path", rb"/" + _SEGMENT + rb"+/" + _SEGMENT + rb"|[.~]/" + _SEGMENT + rb"|\.(?:" + _GATE_EXTENSIONS
            + rb")", _paths, stage="path"),
    # A segment's character beside a slash.
    Scanner("folder", "path", _SEGMENT + rb"/|/" + _SEGMENT, _folders, not_user=True, stage="path"),
    Scanner("url", "url", rb"http", _urls),
    Scanner("uuid", "id", _UUID_HINT_RE.pattern.encode(), _uuids),
    Scanner("hash", "id", rb"[0-9a-f]{7}", _hashes),
    Scanner("issue", "id", rb"(?:" + b"|".join(caseless(w) for w in ("pr", "pull request", "issue", "ticket", "bug", "mr"))
            + rb")" + _SPACE + rb"*#?" + _SPACE + rb"*" + _DIGIT + rb"|#" + _DIGIT * 2, _issues),
    Scanner("version", "id", _DIGIT + rb"\." + _DIGIT, _versions),
    # A code is kept when it mixes letters and digits, or holds "-" or "_".
    Scanner("code", "id", rb"[A-Z][0-9]|[0-9][A-Z]|[A-Z][A-Z0-9]-" + _DIGIT + rb"|[a-z]_[a-z]+_" + _DIGIT * 3, _codes),
    Scanner("number", "number",
            # A currency sign, or digits, maybe a space, a unit and no letter after it.
            rb"\$|\xe2\x82\xac|\xc2\xa3|\xc2\xa5"
            rb"|" + _DIGIT + rb"[0-9,.\x80-\xff]*" + _SPACE + rb"?(?:" + _GATE_UNITS + rb")(?:[^A-Za-z]|$)",
            _numbers),
)
