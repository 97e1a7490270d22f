"""What a search query asks for: its terms as typed, its words, and the keys of any-word matching.

A term is a whitespace-separated piece of the query. Punctuation around a term is not part of it ("class?"
is the word "class"); an apostrophe inside a word is language, not code: "Nate's" is the word "Nate" and
"O'Brien" the words "O" and "Brien", as both word indexes split them (the clitics 's, 't, 'll, 're, 've, 'd
and 'm are left out: nearly every message holds them). A term with other punctuation or CJK characters
inside ("deploy/config.yaml", "上下文") is a substring to find exactly. All-words matching requires every word as typed — a word the caller chose is
not dropped — stop words as whole words (as prefixes "what" would match every "whatever"), the others as
prefixes. Any-word matching looks for the informative words only: stop words ("what", "did", "the") are
left out, or every message would match and the ranking would be all that decides. It cuts each word to a
stem, which matches as a prefix ("painting" → ``paint*`` also finds "paints" and "painted"); a stem of one
or two characters matches only itself (as a prefix it would match hundreds of words).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MIN_PREFIX", "STOP_WORDS", "Query", "matches_as_prefix", "parse_query", "split_terms", "stem"]

_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]")
# Unicode letters and digits: the characters the word indexes (FTS5 unicode61, PostgreSQL's parser) keep.
_WORDS = re.compile(r"[^\W_]+")
_EDGE_PUNCTUATION = "\"'`“”‘’«»()[]{}<>,.;:!?¿¡…"
_APOSTROPHES = re.compile(r"['’]")
_CLITICS = frozenset({"s", "t", "ll", "re", "ve", "d", "m"})
# English function words, question words and chat filler: what a question is made of besides its topic.
STOP_WORDS = frozenset("""
a about above after again against all almost also although am among an and another any anybody anyone
anything are aren around as at be became because been before being below between both but by can cannot
could couldn did didn do does doesn doing don done down during each either else ever every few for from
further get gets getting got had hadn has hasn have haven having he her here hers herself him himself his
how however i if in into is isn it its itself just let like ll me might mine more most much must mustn my
myself need no nor not now of off often on once one only or other others ought our ours ourselves out over
own quite rather re really said same say says shall she should shouldn since so some something still such
than that the their theirs them themselves then there these they thing things this those though through
thus to too toward under until up upon us ve very via was wasn way we were weren what whatever when
whenever where whether which while who whom whose why will with within without won would wouldn yeah yes
yet you your yours yourself yourselves hey hi hello oh ok okay sure thanks thank please lol wow
""".split())
# Suffixes cut off a word before prefix matching, longest first; the stem keeps at least 4 characters.
_SUFFIXES = ("ings", "ing", "ied", "ies", "ed", "es", "ly", "s")
_MIN_STEM = 4
# Any-word keys shorter than this match whole words only.
MIN_PREFIX = 3


def split_terms(query: str) -> list[str]:
    """The query's terms (whitespace-separated, duplicates dropped, order kept)."""
    return list(dict.fromkeys(query.split()))


def stem(word: str) -> str:
    """``word`` (lower case) without an inflection suffix, when at least 4 characters remain."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def matches_as_prefix(word: str, *, required: bool) -> bool:
    """Whether ``word`` matches as a word prefix (else as a whole word): a required word unless it is a stop
    word, an any-word key from `MIN_PREFIX` characters on."""
    return word.lower() not in STOP_WORDS if required else len(word) >= MIN_PREFIX


def _word_parts(term: str) -> list[str] | None:
    """The words of ``term`` (its parts between apostrophes, clitics left out), or None when it is not made
    of words alone."""
    first, *rest = _APOSTROPHES.split(term)
    parts = [first, *(p for p in rest if p.lower() not in _CLITICS)]
    if not all(p.isalnum() and not _CJK.search(p) for p in [first, *rest]):
        return None
    return parts


@dataclass(frozen=True)
class Query:
    """A parsed query. ``words`` is set when every term is a plain word (the word index serves it, every word
    required); ``substrings`` otherwise (every term must occur as typed). ``keys`` are the
    stems any-word matching looks for; ``phrase`` the whole query on one line, to show where it occurs
    verbatim."""

    terms: tuple[str, ...]
    words: tuple[str, ...]
    substrings: tuple[str, ...]
    keys: tuple[str, ...]
    phrase: str


def parse_query(query: str) -> Query:
    """Split ``query`` into its terms, words and any-word keys (see the module docstring)."""
    terms = split_terms(query)
    parts = [_word_parts(t.strip(_EDGE_PUNCTUATION) or t) for t in terms]
    plain = all(p is not None for p in parts)
    words = tuple(dict.fromkeys(w for p in parts if p is not None for w in p)) if plain else ()
    tokens = (w.lower() for w in _WORDS.findall(query) if not _CJK.search(w))
    keys = tuple(dict.fromkeys(stem(w) for w in tokens if len(w) > 1 and w not in STOP_WORDS))
    return Query(terms=tuple(terms), words=words, substrings=() if plain else tuple(terms), keys=keys,
                 phrase=" ".join(query.split()))
