"""Markdown → Telegram HTML: each construct, escaping, literal look-alikes, and hypothesis properties.

Validity is judged by the fake Bot API's parser (``telegram_html_text``, written apart from the converter),
plus Telegram's nesting rules: nothing inside code or pre (but pre's own code), no link or code inside a link,
no block inside a quote.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telegram_format import escape_html, markdown_to_telegram_html
from tests.fakes.telegram_server import telegram_html_text

_TAG = re.compile(r"<(/?)([a-z-]+)[^>]*>")
# Characters the converter may consume or put in (see the module docstring), and whitespace.
_MARKUP = set("*_~`#>[]()\\<-+•")


def _nesting_ok(markup: str) -> bool:
    """Telegram's nesting rules on markup already known to parse."""
    stack: list[str] = []
    for match in _TAG.finditer(markup):
        closing, name = match.groups()
        if closing:
            stack.pop()
            continue
        if "code" in stack or ("pre" in stack and name != "code"):
            return False
        if "a" in stack and name in ("a", "code", "pre", "blockquote"):
            return False
        if "blockquote" in stack and name in ("blockquote", "pre"):
            return False
        stack.append(name)
    return True


def _shown(markdown: str) -> str:
    """The converted text as Telegram shows it, after checking the markup is valid for Telegram."""
    markup = markdown_to_telegram_html(markdown)
    shown = telegram_html_text(markup)
    assert _nesting_ok(markup), markup
    return shown


def _keep(text: str) -> str:
    return "".join(c for c in text if c not in _MARKUP and not c.isspace())


def _is_subsequence(small: str, big: str) -> bool:
    rest = iter(big)
    return all(char in rest for char in small)


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*italic* and _italic_", "<i>italic</i> and <i>italic</i>"),
        ("***both*** and ~~gone~~", "<b><i>both</i></b> and <s>gone</s>"),
        ("**bold with *italic* inside**", "<b>bold with <i>italic</i> inside</b>"),
        ("*italic with **bold** inside*", "<i>italic with <b>bold</b> inside</i>"),
        ("(**Note**): done.", "(<b>Note</b>): done."),
        ("use `x = a < b && c`", "use <code>x = a &lt; b &amp;&amp; c</code>"),
        ("`**not bold** <b>`", "<code>**not bold** &lt;b&gt;</code>"),
        ("``a ` b`` and `` `x` ``", "<code>a ` b</code> and <code>`x`</code>"),
        ("see [the docs](https://example.com/a?b=1&c=2)",
         'see <a href="https://example.com/a?b=1&amp;c=2">the docs</a>'),
        ("[wiki](https://en.wikipedia.org/wiki/Foo_(bar)) ok",
         '<a href="https://en.wikipedia.org/wiki/Foo_(bar)">wiki</a> ok'),
        ('[q](https://x.org/"quoted"<tag>)', '<a href="https://x.org/&quot;quoted&quot;&lt;tag&gt;">q</a>'),
        ("[**bold** `code` link](http://x.org)", '<a href="http://x.org"><b>bold</b> code link</a>'),
        ("[outer [inner](http://a.org)](http://b.org)", '<a href="http://b.org">outer [inner](http://a.org)</a>'),
        ("go to <https://example.com/x>", "go to https://example.com/x"),
        ("# Title", "<b>Title</b>"),
        ("### Closed heading ###", "<b>Closed heading</b>"),
        ("## **Bold** and *it*", "<b>Bold and <i>it</i></b>"),
        ("# C# notes", "<b>C# notes</b>"),
        ("> quoted *line*\n> second\nafter", "<blockquote>quoted <i>line</i>\nsecond</blockquote>\nafter"),
        ("> a\n\n> b", "<blockquote>a</blockquote>\n\n<blockquote>b</blockquote>"),
        (">> nested", "<blockquote>&gt; nested</blockquote>"),
        ("- one\n* two\n+ three\n  - sub **b**", "• one\n• two\n• three\n  • sub <b>b</b>"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("```python\nif a < b and c:\n    print(\"**x**\")\n```\nafter",
         '<pre><code class="language-python">if a &lt; b and c:\n    print("**x**")</code></pre>\nafter'),
        ("```\nplain <b>\n```", "<pre>plain &lt;b&gt;</pre>"),
        ("````md\n```\ninner fence\n```\n````", '<pre><code class="language-md">```\ninner fence\n```</code></pre>'),
        ("```\nnever closed *x*", "<pre>never closed *x*</pre>"),
        ("```a\"b><\n1\n```", "<pre>1</pre>"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("\\*not italic\\* and \\_ and \\\\", "*not italic* and _ and \\"),
    ],
)
def test_constructs(markdown: str, expected: str) -> None:
    assert markdown_to_telegram_html(markdown) == expected
    _shown(markdown)


@pytest.mark.parametrize(
    "literal",
    [
        "snake_case_words and __init__py_file",
        "my_file_name.py",
        "the var_name_ here and 3*x* there",
        "2*3*4 = 24",
        "5 * 3 * 2",
        "*args and **kwargs",
        "**unbalanced bold",
        "*unbalanced italic",
        "~~unbalanced strike",
        "~5 minutes",
        "`unclosed code",
        "[label](http://unclosed.org",
        "[label] (http://space.org)",
        "[js](javascript:alert(1))",
        "[ftp](ftp://example.com)",
        "[ ](https://empty-label.org)",
        "[spaced](https://a.org/b c)",
        "#hashtag",
        "-5 degrees",
        "----",
        "C:\\Users\\me",
        "****",
        "a**b**c",
    ],
)
def test_look_alikes_stay_literal(literal: str) -> None:
    assert markdown_to_telegram_html(literal) == escape_html(literal)
    assert _shown(literal) == literal


def test_fence_language_is_kept_only_when_it_is_a_plain_name() -> None:
    assert markdown_to_telegram_html("```c++\nx\n```") == '<pre><code class="language-c++">x</code></pre>'
    assert markdown_to_telegram_html("```" + "y" * 40 + "\nx\n```") == "<pre>x</pre>"


def test_empty_heading_and_empty_fence_show_nothing() -> None:
    assert markdown_to_telegram_html("#") == ""
    assert markdown_to_telegram_html("```\n```") == "<pre></pre>"


def test_the_validator_rejects_what_telegram_rejects() -> None:
    # The checks below judge the converter by this parser, so it must be able to say no.
    for bad in ("<foo>x</foo>", "<b>x", "x</b>", "<b><i>x</b></i>", "a & b", "a < b",
                '<pre class="x">y</pre>', "&nbsp;"):
        with pytest.raises(ValueError):
            telegram_html_text(bad)
    assert telegram_html_text('<b>a</b> &lt;&amp;&quot;&#33; <a href="http://x">y</a>') == 'a <&"! y'
    assert not _nesting_ok("<code><b>x</b></code>") and not _nesting_ok('<a href="h"><code>x</code></a>')


_MARKDOWNISH = st.lists(
    st.sampled_from([*"*_~`#>[]()\\<>&\"' \n-+.:abcé😀1", "**", "```", "](", "https://e.org/", "> ", "- "]),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), _MARKDOWNISH))
def test_any_text_gives_valid_markup_that_keeps_the_text(text: str) -> None:
    shown = _shown(text)
    # Nothing is invented and order is kept; only link destinations and fence info strings (besides the
    # markup characters) can go, so without those every other character is shown.
    assert _is_subsequence(_keep(shown), _keep(text))
    if "](" not in text and "```" not in text:
        assert _keep(shown) == _keep(text)


_WORD = st.text(alphabet=st.sampled_from(list("abcXYZ019<&\"'.,:;!?é😀")), min_size=1, max_size=8)
_CODE = st.text(alphabet=st.sampled_from(list("ab *_~<>&[]()#\\\"'")), min_size=1, max_size=10).filter(
    lambda c: c.strip() == c and c)
_URL = st.text(alphabet=st.sampled_from(list("abc019/-_.?=&\"'<>%")), max_size=12).map(lambda p: "https://e.org/" + p)


def _wrap(marker: str) -> st.SearchStrategy[tuple[str, str]]:
    return _WORD.map(lambda w: (f"{marker}{w}{marker}", w))


_PIECE = st.one_of(
    _WORD.map(lambda w: (w, w)),
    _wrap("**"), _wrap("*"), _wrap("_"), _wrap("__"), _wrap("~~"), _wrap("***"),
    _CODE.map(lambda c: (f"`{c}`", c)),
    st.tuples(_WORD, _URL).map(lambda wu: (f"[{wu[0]}]({wu[1]})", wu[0])),
    st.tuples(_WORD, _WORD).map(lambda ww: (f"**{ww[0]} *{ww[1]}* x**", f"{ww[0]} {ww[1]} x")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECE, min_size=1, max_size=8))
def test_well_formed_markdown_shows_exactly_its_text(pieces: list[tuple[str, str]]) -> None:
    markdown = " ".join(md for md, _ in pieces)
    assert _shown(markdown) == " ".join(shown for _, shown in pieces)
    hrefs = re.findall(r'<a href="([^"]*)">', markdown_to_telegram_html(markdown))
    links = re.findall(r"\]\((https://e\.org/[^ ]*)\)", markdown)
    assert [telegram_html_text(h) for h in hrefs] == links
