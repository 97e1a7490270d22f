"""A summary that came back longer than asked (or cut at ``max_tokens``) is shortened, not thrown away.

It was paid for, and most of it is good. Shortening is deterministic: a line the model did not finish (the
call stopped at ``max_tokens``) goes first; then, while the body is over its budget, the last line of the
longest section, so every section keeps its header and its first lines. A single line longer than the
whole budget keeps its head. The same bound applies to the static summary, whose own caps are meant for
large windows.
"""

from __future__ import annotations

from agent.tokens import TokenCounter

__all__ = ["shorten_summary"]

_HEADER_MARK = "#"


def _is_header(line: str) -> bool:
    return line.lstrip().startswith(_HEADER_MARK)


def shorten_summary(body: str, budget: int, counter: TokenCounter, *, cut_off: bool = False) -> str:
    """``body`` within ``budget`` tokens; ``cut_off``: the model stopped mid-answer (its last line is partial)."""
    lines: list[str | None] = list(body.rstrip().split("\n"))
    if cut_off and len(lines) > 1:
        lines.pop()
    # A token covers at least one byte: a body whose bytes (and line breaks) fit the budget fits it counted.
    if sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines if line is not None) <= budget:
        return "\n".join(line or "" for line in lines).strip()
    costs = [counter.count_text(line) + 1 if line else 1 for line in lines]
    total = sum(costs)
    if total <= budget:
        return "\n".join(line or "" for line in lines).strip()
    # Sections: the header line index each line belongs to (-1 before the first header).
    section_of: list[int] = []
    current = -1
    for i, line in enumerate(lines):
        if _is_header(line or ""):
            current = i
        section_of.append(current)
    removable = {i for i, line in enumerate(lines) if line and line.strip() and not _is_header(line)}
    while total > budget and removable:
        sizes: dict[int, int] = {}
        for i in removable:
            sizes[section_of[i]] = sizes.get(section_of[i], 0) + costs[i]
        longest = max(sizes, key=lambda s: (sizes[s], -s))
        last = max(i for i in removable if section_of[i] == longest)
        removable.discard(last)
        total -= costs[last]
        lines[last] = None
    text = "\n".join(line for line in lines if line is not None).strip()
    if counter.count_text(text) > budget:  # headers alone, or one enormous line: keep the head
        text = _head(text, budget, counter)
    return text


def _head(text: str, budget: int, counter: TokenCounter) -> str:
    tokens = counter.count_text(text)
    if tokens <= budget:
        return text
    keep = int(len(text) * budget / tokens)
    while keep > 0 and counter.count_text(text[:keep]) > budget:
        keep = int(keep * 0.9)
    return text[:keep].rstrip()
