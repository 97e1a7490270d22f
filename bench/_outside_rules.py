"""Rules someone states, found by the words around a deontic cue (`bench._independent_facts`'s rule kind).

A sentence (a line cut at ``.``, ``!``, ``?``, ``;``) is read word by word. A cue — a prohibition (``don't``,
``never``, ``avoid``), an obligation (``always``, ``must``, ``make sure``, ``be sure to``, ``remember to``,
``only use``) or a stated preference (``I prefer``, ``I'd rather``, ``I don't want``, ``I don't need``) —
starts a rule where it opens a clause: at the sentence's start, after a comma, after "please", "but", "and",
"so", or after "we" ("we never push to main"); the rule runs to the end of that clause (the sentence's end, or
", and" / "but" and the like). Questions, habits ("I never liked"), states of mind ("don't know", "never mind")
and guesses ("it must be", "you must really enjoy") are not rules. A "nick:" address before the words is left out.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["stated_rules"]

_PUNCTUATION = "\"'`()[]{}<>,;|*!?.:"
# After "don't" / "do not": the speaker's state of mind, not a rule ("I don't know").
_NOT_AFTER_DONT = frozenset("""know think understand care remember see get have mind worry believe recall mean
really quite even feel seem need like use recognize suppose wanna expect find hear agree blame""".split())
# After "never" / "always": narration ("never heard", "always been").
_NOT_AFTER_NEVER = frozenset("""mind heard seen knew thought been had was were did got ever really again before
once in the a an used liked loved hated wanted said understood noticed find found get works worked
happens happened fails failed love enjoy hear feel make say happy glad great good nice fun cool interesting busy
there here so such too very more less fine""".split())
_NOT_AFTER_MUST = frozenset("be have say admit confess 've really feel love enjoy mean think".split())
# Who may state a rule by "never X" / "always X" / "don't X": the listener, "we", or nobody (imperative).
_RULE_SUBJECTS = frozenset({"we", "please", "pls", "plz", "just", "kindly", "also", "and", "but",
                            "so", "then", "ok", "okay", "oh", "now", "simply"})
_CLAUSE_LINKS = frozenset({"and", "but", "so", "because", "since", "then", "otherwise", "which", "or", "though",
                           "although", "while", "as"})
_ONLY_VERBS = frozenset("use run touch edit change commit push deploy answer reply write call install".split())
_PREFER = (("i", "prefer"), ("i'd", "prefer"), ("we", "prefer"), ("i", "would", "prefer"),
           ("i", "would", "much", "prefer"), ("i'd", "much", "prefer"), ("i'd", "rather"), ("i", "would", "rather"),
           ("we'd", "rather"), ("i", "don't", "want"), ("i", "do", "not", "want"), ("we", "don't", "want"),
           ("i", "dont", "want"), ("i", "don't", "need"), ("i", "do", "not", "need"), ("we", "don't", "need"))

_QUESTION_WORDS = ("How ", "What ", "Why ", "Where ", "When ", "Who ", "Which ", "Can ", "Could ", "Is ", "Do ",
                   "Does ", "Should ")


def _sentences(text: str) -> Iterator[str]:
    """Sentences: a line cut after ``.``, ``!``, ``?`` or ``;`` followed by a space, and before a question
    run on after a comma (", How can I …?")."""
    for line in text.splitlines():
        start = 0
        for i, char in enumerate(line):
            if char in ".!?;" and (i + 1 == len(line) or line[i + 1] == " "):
                yield line[start : i + 1].strip()
                start = i + 1
            elif char == "," and line.startswith(_QUESTION_WORDS, i + 2) and line[i + 1 : i + 2] == " ":
                yield line[start:i].strip()
                start = i + 1
        if line[start:].strip():
            yield line[start:].strip()


def _norm(word: str) -> str:
    return word.lower().replace("’", "'").strip(_PUNCTUATION)


def _cue_at(words: list[str], i: int, clause_start: bool) -> int | None:
    """Where the rule starting at a cue at ``words[i]`` begins (its subject, if any), or None;
    ``clause_start``: the word before it ends a clause (a comma)."""
    word = words[i]
    before = words[i - 1] if i else ""
    nxt = words[i + 1] if i + 1 < len(words) else ""
    after_two = words[i + 2] if i + 2 < len(words) else ""
    for pattern in _PREFER:
        if tuple(words[i : i + len(pattern)]) == pattern and (i == 0 or before in _RULE_SUBJECTS):
            return i
    subject_ok = i == 0 or before in _RULE_SUBJECTS or clause_start
    start = i - 1 if before == "we" else i
    if word in ("don't", "dont") or (word == "do" and nxt == "not"):
        verb = after_two if word == "do" else nxt
        return start if subject_ok and verb and verb not in _NOT_AFTER_DONT else None
    if word in ("never", "always"):
        narrated = nxt in _NOT_AFTER_NEVER or nxt.endswith("ing")
        return start if subject_ok and nxt and not narrated else None
    if word in ("must", "mustn't"):
        return None if before in ("i", "it", "that", "this", "there", "he", "she", "they") or \
            nxt in _NOT_AFTER_MUST else max(i - 1, 0)
    subject_ok = subject_ok or before in ("you", "u")
    if (word, nxt) in (("make", "sure"), ("be", "sure"), ("remember", "to"), ("avoid", nxt)) and subject_ok:
        return start if nxt else None
    if word == "only" and nxt in _ONLY_VERBS and subject_ok:
        return start
    return None


def _rule_end(raw: list[str], start: int) -> int:
    """The end (exclusive) of the clause that begins at ``raw[start]``."""
    for j in range(start + 1, len(raw)):
        word = _norm(raw[j])
        if (raw[j - 1].endswith(",") and word in _CLAUSE_LINKS) or word == "but":
            return j
        if raw[j].endswith((",", ":")) and j + 1 < len(raw) and _norm(raw[j + 1]) in _CLAUSE_LINKS:
            return j + 1
    return len(raw)


def stated_rules(text: str) -> Iterator[str]:
    """The clauses of ``text`` that state a rule or a preference, in text order (see the module docstring)."""
    for sentence in _sentences(text):
        if sentence.endswith("?"):
            continue
        raw = sentence.split()
        if raw and raw[0].endswith((":", ",")) and len(raw) > 1 and raw[0][:-1].lower() not in ("note", "ps"):
            raw = raw[1:]  # "nick: don't …" addresses someone
        words = [_norm(w) for w in raw]
        i = 0
        while i < len(words):
            start = _cue_at(words, i, bool(i) and raw[i - 1].endswith((",", ";", ":", "-")))
            if start is None:
                i += 1
                continue
            end = _rule_end(raw, max(start, i))
            clause = " ".join(raw[start:end]).rstrip(".,;:!")
            if len(clause.split()) >= 2:
                yield clause
            i = end
