"""The fence-aware splitter: examples for each boundary kind and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.base import split_message, utf16_len


def _fence_lines_balanced(chunk: str) -> bool:
    """Independent CommonMark-style check: every opened ``` fence in the chunk is closed."""
    open_ticks = 0
    for line in chunk.split("\n"):
        stripped = line.strip()
        if not stripped.startswith("```"):
            continue
        ticks = len(stripped) - len(stripped.lstrip("`"))
        if open_ticks == 0:
            open_ticks = ticks
        elif ticks >= open_ticks and stripped[ticks:].strip() == "":
            open_ticks = 0
    return open_ticks == 0


def _content(text: str) -> str:
    """Non-whitespace characters outside fence lines (the splitter may add fence lines, nothing else)."""
    kept = [line for line in text.split("\n") if not line.strip().startswith("```")]
    return "".join("".join(kept).split())


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello", 2000) == ["hello"]


def test_blank_text_gives_no_chunks() -> None:
    assert split_message("  \n\n ", 2000) == []


def test_prefers_paragraph_boundary() -> None:
    text = "a" * 60 + "\n\n" + "b" * 30 + "\n" + "c" * 30
    assert split_message(text, 100) == ["a" * 60, "b" * 30 + "\n" + "c" * 30]


def test_prefers_line_over_sentence() -> None:
    text = "One. Two. " + "x" * 50 + "\n" + "y" * 60
    assert split_message(text, 80) == ["One. Two. " + "x" * 50, "y" * 60]


def test_sentence_then_word_then_hard_cut() -> None:
    sentence = split_message("Alpha beta gamma. Delta epsilon zeta eta theta", 30)
    assert sentence[0] == "Alpha beta gamma."
    words = split_message("alpha beta gamma delta epsilon zeta", 20)
    assert words[0] == "alpha beta gamma"
    assert split_message("x" * 45, 20) == ["x" * 20, "x" * 20, "x" * 5]


def test_code_fence_closed_and_reopened_with_language() -> None:
    code = "\n".join(f"print({i})" for i in range(40))
    text = f"Here:\n\n```python\n{code}\n```\nDone."
    chunks = split_message(text, 120)
    assert len(chunks) > 2
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n")
        assert chunk.endswith("\n```")
    assert all(_fence_lines_balanced(c) and len(c) <= 120 for c in chunks)
    assert _content("".join(chunks)) == _content(text)


def test_continuation_prefix_and_fence_on_own_line() -> None:
    text = "```js\n" + "\n".join(f"let v{i} = {i};" for i in range(30)) + "\n```"
    chunks = split_message(text, 100, continuation_prefix="@alice ")
    assert not chunks[0].startswith("@alice")
    for chunk in chunks[1:]:
        assert chunk.startswith("@alice \n```js\n")


def test_utf16_length_counts_astral_characters_twice() -> None:
    assert utf16_len("a😀") == 3
    chunks = split_message("😀" * 100, 50, length=utf16_len)
    assert [utf16_len(c) for c in chunks] == [50, 50, 50, 50]


def test_mid_line_backticks_never_become_a_fence() -> None:
    text = "word " * 10 + "```notafence " + "z" * 30
    for chunk in split_message(text, 40):
        assert _fence_lines_balanced(chunk)
    assert _content("".join(split_message(text, 40))) == _content(text)


def test_limit_too_small_for_prefix_raises() -> None:
    try:
        split_message("x" * 100, 10, continuation_prefix="@someone-long ")
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_mid_line_backticks_stay_mid_line_when_only_blank_lines_fit_before_them() -> None:
    # Found by the property test: blank code lines, then "a```b", at a tiny limit.
    text = "a a\n\n```python\n    a a\n    \n    \n    \n    a```b\n```"
    chunks = split_message(text, 40, continuation_prefix="@bob ")
    assert all(len(c) <= 40 and _fence_lines_balanced(c) for c in chunks)
    assert not any(line.startswith("```b") for c in chunks for line in c.split("\n"))
    assert "a```b" in "".join(chunks)


_word = st.one_of(
    st.text(alphabet="abcdefghij😀é你", min_size=1, max_size=12),
    st.sampled_from(["end.", "why?", "``", "`x`", "a```b", "--"]),
)
_line = st.lists(_word, min_size=0, max_size=12).map(" ".join)
_code = st.tuples(st.sampled_from(["", "python", "js", "c++"]), st.lists(_line, max_size=15)).map(
    lambda lc: f"```{lc[0]}\n" + "\n".join("    " + line for line in lc[1]) + "\n```"
)
_block = st.one_of(_line, _code, st.lists(_line, max_size=4).map("\n".join))
_text = st.lists(_block, max_size=12).map("\n\n".join)


@settings(max_examples=300, deadline=None)
@given(_text, st.integers(min_value=40, max_value=300), st.sampled_from([len, utf16_len]),
       st.sampled_from(["", "@bob "]))
def test_split_properties(text: str, limit: int, length, prefix: str) -> None:
    chunks = split_message(text, limit, length=length, continuation_prefix=prefix)
    for index, chunk in enumerate(chunks):
        assert length(chunk) <= limit
        assert chunk.strip()
        assert _fence_lines_balanced(chunk)
        if index and prefix:
            assert chunk.startswith(prefix)
    bodies = [c[len(prefix):] if i and prefix else c for i, c in enumerate(chunks)]
    assert _content("\n".join(bodies)) == _content(text)
