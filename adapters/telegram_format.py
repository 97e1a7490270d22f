"""Markdown as language models write it, turned into Telegram Bot API HTML (``parse_mode="HTML"``).

Telegram refuses a whole message whose HTML it cannot parse, and its HTML mode knows only a few tags (b, i,
u, s, a href, code, pre, blockquote, tg-spoiler) and the entities &lt; &gt; &amp; &quot;. So every input
character is escaped on its own, and tags are only ever written in balanced pairs around converted text.

Blocks, line by line: a ``` fence (the same rule as :mod:`adapters.split`: any line whose first non-blank
characters are ```, closed by a bare fence of at least as many backticks, or by the end of the text) becomes
``<pre><code class="language-x">``, its content escaped and never formatted; ``# heading`` becomes a bold
line; consecutive ``> quote`` lines become one ``<blockquote>``; ``- item`` / ``* item`` / ``+ item``
become ``• item``. Inline, within one line: ```code```, ``**bold**`` / ``__bold__``, ``*italic*`` /
``_italic_``, ``***both***``, ``~~strike~~``, ``[label](http(s) URL)``, ``<http(s) URL>`` and backslash
escapes of ASCII punctuation.

An emphasis marker opens only after a non-alphanumeric character and before a non-space, and closes only
after a non-space and before a non-alphanumeric character, so ``snake_case_names``, ``2*3*4`` and
``5 * 3`` stay literal. A marker without a partner stays literal. Links take http and https only.

What may be consumed (never shown): emphasis, strike and code-span markers (with the one space padding a
code span on each side); a link's brackets, parentheses and destination; an autolink's angle brackets; the
backslash of an escape; a heading's ``#`` marks and the whitespace after them; a quote's ``>`` and one space
after it; whole fence lines with their info string. A list marker becomes "•". Every other character is
shown, in order.
"""

from __future__ import annotations

import bisect
import re
import string

_FENCE_LANG = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]+(.*))?$")
# From a run of blanks' start only, the runs taken whole: from every blank, each read the rest of the run, 11 s for a
# heading with 32,000 blanks in it.
_HEADING_CLOSE = re.compile(r"(?<![ \t])[ \t]++#++[ \t]*+$")
_QUOTE = re.compile(r" {0,3}>[ ]?(.*)$")
_LIST_ITEM = re.compile(r"([ \t]*)[-*+][ \t]+(.*)$")
_URL = re.compile(r"https?://\S+", re.IGNORECASE)
_AUTOLINK = re.compile(r"<(https?://[^\s<>]+)>", re.IGNORECASE)
# Marker character and run length → the tags it stands for, outermost first.
_EMPHASIS: dict[tuple[str, int], tuple[str, ...]] = {
    ("*", 1): ("i",), ("*", 2): ("b",), ("*", 3): ("b", "i"),
    ("_", 1): ("i",), ("_", 2): ("b",), ("_", 3): ("b", "i"),
    ("~", 2): ("s",),
}
_PUNCTUATION = frozenset(string.punctuation)


def markdown_to_telegram_html(text: str) -> str:
    """Telegram HTML for the Markdown ``text`` (see the module docstring for what is converted)."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _fence_open(line)
        if fence is not None:
            ticks, lang = fence
            body: list[str] = []
            index += 1
            while index < len(lines) and not _fence_closes(lines[index], ticks):
                body.append(lines[index])
                index += 1
            index += 1  # the closing fence line (or past the end)
            out.append(_pre("\n".join(body), lang))
            continue
        if _QUOTE.match(line):
            quoted: list[str] = []
            while index < len(lines) and (match := _QUOTE.match(lines[index])):
                quoted.append(_line(match.group(1)))
                index += 1
            out.append("<blockquote>" + "\n".join(quoted) + "</blockquote>")
            continue
        out.append(_line(line))
        index += 1
    return "\n".join(out)


def escape_html(text: str) -> str:
    """``text`` with the three characters Telegram's HTML mode reserves escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attribute(text: str) -> str:
    return escape_html(text).replace('"', "&quot;")


# -- blocks ----------------------------------------------------------------------------------------
def _fence_open(line: str) -> tuple[int, str] | None:
    """(backtick count, language) when ``line`` opens a fence; the language only when it is a plain name."""
    stripped = line.strip()
    if not stripped.startswith("```"):
        return None
    ticks = len(stripped) - len(stripped.lstrip("`"))
    info = stripped[ticks:].split()
    lang = info[0] if info and _FENCE_LANG.fullmatch(info[0]) else ""
    return ticks, lang


def _fence_closes(line: str, ticks: int) -> bool:
    stripped = line.strip()
    run = len(stripped) - len(stripped.lstrip("`"))
    return run >= 3 and run >= ticks and stripped[run:].strip() == ""


def _pre(code: str, lang: str) -> str:
    if lang:
        return f'<pre><code class="language-{lang}">{escape_html(code)}</code></pre>'
    return f"<pre>{escape_html(code)}</pre>"


def _line(line: str) -> str:
    """One line outside code: a heading, a list item, or plain inline text."""
    heading = _HEADING.match(line)
    if heading is not None:
        content = _HEADING_CLOSE.sub("", heading.group(1) or "").strip()
        return f"<b>{_inline(content, frozenset({'b'}))}</b>" if content else ""
    item = _LIST_ITEM.match(line)
    if item is not None:
        return f"{item.group(1)}• {_inline(item.group(2))}"
    return _inline(line)


# -- inline ----------------------------------------------------------------------------------------
def _inline(text: str, active: frozenset[str] = frozenset()) -> str:
    """Convert one line's inline Markdown; ``active`` holds tags already open around it (never reopened)."""
    return _Inline(text).render(0, len(text), active)


def _run(text: str, pos: int) -> int:
    """Length of the run of ``text[pos]`` starting at ``pos``."""
    end = pos
    while end < len(text) and text[end] == text[pos]:
        end += 1
    return end - pos


def _closing_backticks(text: str, start: int, run: int) -> int | None:
    """Start of the next backtick run of exactly ``run`` at or after ``start``."""
    pos = text.find("`", start)
    while pos != -1:
        length = _run(text, pos)
        if length == run:
            return pos
        pos = text.find("`", pos + length)
    return None


class _Inline:
    """One line, with what the scans need worked out once, left to right (so a line converts in near-linear
    time however many markers lack a partner): code spans and backslash escapes, whose characters are never
    markup; emphasis closers by marker and run length; bracket pairs; parenthesis pairs (a link destination
    is taken as it stands, so these ignore code and escapes, and whitespace ends them)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.code_end: dict[int, int] = {}  # start of a code span → just past its closing backticks
        self.escapes: set[int] = set()  # backslashes that escape the next character
        protected = [False] * len(text)
        pos = 0
        while pos < len(text):
            if text[pos] == "\\" and pos + 1 < len(text) and text[pos + 1] in _PUNCTUATION:
                self.escapes.add(pos)
                protected[pos] = protected[pos + 1] = True
                pos += 2
            elif text[pos] == "`":
                run = _run(text, pos)
                close = _closing_backticks(text, pos + run, run)
                if close is not None:
                    self.code_end[pos] = close + run
                    protected[pos : close + run] = [True] * (close + run - pos)
                pos = pos + run if close is None else close + run
            else:
                pos += 1
        self.closers: dict[tuple[str, int], list[int]] = {}
        pos = 0
        while pos < len(text):
            if text[pos] not in "*_~" or protected[pos]:
                pos += 1
                continue
            run = _run(text, pos)
            if self._can_close(pos, run):
                self.closers.setdefault((text[pos], run), []).append(pos)
            pos += run
        self.brackets = _pairs(text, "[", "]", protected)
        self.parens = _pairs(text, "(", ")", None)

    def render(self, start: int, end: int, active: frozenset[str]) -> str:
        """HTML for ``text[start:end]``; ``active`` holds the tags open around it, and "code" where code tags
        are not allowed (inside a link)."""
        text = self.text
        out: list[str] = []
        pos = start
        while pos < end:
            char = text[pos]
            converted: tuple[str, int] | None = None
            if pos in self.escapes:
                converted = escape_html(text[pos + 1]), pos + 2
            elif char == "`" and self.code_end.get(pos, end + 1) <= end:
                converted = self._code_span(pos, active)
            elif char in "*_~":
                converted = self._emphasis(pos, end, active)
            elif char == "[" and "a" not in active:
                converted = self._link(pos, end, active)
            elif char == "<" and (auto := _AUTOLINK.match(text, pos, end)):
                converted = escape_html(auto.group(1)), auto.end()  # Telegram links bare URLs by itself
            if converted is None:
                run = min(_run(text, pos), end - pos) if char in "`*_~" else 1  # an unmatched run stays whole
                converted = escape_html(text[pos : pos + run]), pos + run
            out.append(converted[0])
            pos = converted[1]
        return "".join(out)

    def _can_open(self, pos: int, run: int) -> bool:
        before = self.text[pos - 1] if pos > 0 else " "
        after = self.text[pos + run] if pos + run < len(self.text) else " "
        return not after.isspace() and not before.isalnum()

    def _can_close(self, pos: int, run: int) -> bool:
        before = self.text[pos - 1] if pos > 0 else " "
        after = self.text[pos + run] if pos + run < len(self.text) else " "
        return not before.isspace() and not after.isalnum()

    def _code_span(self, pos: int, active: frozenset[str]) -> tuple[str, int]:
        run, end = _run(self.text, pos), self.code_end[pos]
        code = self.text[pos + run : end - run]
        if len(code) >= 2 and code[0] == code[-1] == " " and code.strip():
            code = code[1:-1]
        body = escape_html(code)
        return (body if "code" in active else f"<code>{body}</code>"), end

    def _emphasis(self, pos: int, end: int, active: frozenset[str]) -> tuple[str, int] | None:
        marker, run = self.text[pos], _run(self.text, pos)
        tags = _EMPHASIS.get((marker, run))
        if tags is None or not self._can_open(pos, run):
            return None
        candidates = self.closers.get((marker, run), [])
        index = bisect.bisect_right(candidates, pos)
        if index == len(candidates) or candidates[index] + run > end:
            return None
        close = candidates[index]
        inner = self.render(pos + run, close, active | set(tags))
        opened = [tag for tag in tags if tag not in active]
        return "".join(f"<{t}>" for t in opened) + inner + "".join(f"</{t}>" for t in reversed(opened)), close + run

    def _link(self, pos: int, end: int, active: frozenset[str]) -> tuple[str, int] | None:
        """``[label](url)`` with an http(s) URL; the label may hold emphasis but no code or other link."""
        close = self.brackets.get(pos)
        if close is None or close + 1 >= end or self.text[close + 1] != "(":
            return None
        stop = self.parens.get(close + 1)
        if stop is None or stop >= end:
            return None
        url = self.text[close + 2 : stop]
        if not _URL.fullmatch(url) or not self.text[pos + 1 : close].strip():
            return None
        inner = self.render(pos + 1, close, active | {"a", "code"})
        return f'<a href="{_escape_attribute(url)}">{inner}</a>', stop + 1


def _pairs(text: str, opening: str, closing: str, protected: list[bool] | None) -> dict[int, int]:
    """Each ``opening`` → the ``closing`` that balances it. With ``protected``, protected characters are
    skipped; without, whitespace closes nothing and drops every pending ``opening``."""
    pairs: dict[int, int] = {}
    pending: list[int] = []
    for pos, char in enumerate(text):
        if protected is not None and protected[pos]:
            continue
        if char == opening:
            pending.append(pos)
        elif char == closing and pending:
            pairs[pending.pop()] = pos
        elif protected is None and char.isspace():
            pending.clear()
    return pairs
