"""The outside fact extractor of bench.reachability: its kinds on made-up lines, and its precision and recall on
a hand-labelled sample of the corpus (``data/outside_facts_sample.json``).

The sample: 263 messages of the transcripts the benchmark does not hold out, labelled by reading each one —
random messages, and messages holding a deontic word, an error word, a non-zero exit, or a number with a unit
(so that each kind has enough facts to count). Samples A–C were labelled first and the extractor corrected
on them; sample D was labelled afterwards and never tuned on, so its figures are the honest ones for new text.
What a label means:
- path: a file-system path (absolute, relative with a folder, a file name with an extension; a URL's path
  after "The requested URL" too), not a URL, a module name or "and/or";
- command: the first line of a shell command a tool ran, or a command a chat user typed or quoted;
- number: a quantity with a unit or a currency ("$136", "24 hours", "0.6s"), not a progress "[100%]";
- error: an exception line, a traceback's last line, a failing test, a tool's or the system's error message
  (pasted into a chat line too), a command with its non-zero exit code ("cmd => 1");
- rule: a clause stating how something must or must not be done, or a stated preference, marked by a
  deontic word (don't, never, always, must, make sure, be sure to, I prefer, I'd rather, I don't want /
  need), anywhere in a user's message; not questions, habits, idioms or opinions ("it must be hard").
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench._independent_facts import OUTSIDE_KINDS, OutsideFact, message_text, outside_facts
from bench.corpus import Transcript, corpus_dir, iter_transcripts

SAMPLE = Path(__file__).parent / "data" / "outside_facts_sample.json"
# What the extractor reaches on the whole sample, and on the part it was never tuned on (D): a change that
# lowers either fails here.
FLOOR = {"path": (0.95, 0.90), "command": (0.95, 0.85), "number": (0.95, 0.90), "error": (0.90, 0.80),
         "rule": (0.70, 0.85)}
FRESH_FLOOR = {"path": (0.95, 0.90), "command": (0.95, 0.65), "number": (0.95, 0.90), "error": (0.90, 0.60),
               "rule": (0.45, 0.60)}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _matches(kind: str, found: str, label: str) -> bool:
    """A path or a number word for word; a command as its first line (or the start of it, ≥ 100 characters);
    an error line or a rule when one holds the other and is at least half as long."""
    found, label = _flat(found), _flat(label)
    if kind in ("path", "number"):
        return found == label
    if " => " in label:  # a command and its exit code
        if " => " not in found:
            return False
        label, label_code = label.rsplit(" => ", 1)
        found, found_code = found.rsplit(" => ", 1)
        if label_code != found_code:
            return False
        kind = "command"
    if kind == "command":
        return label.startswith(found) and len(found) >= min(len(label), 100)
    short, long = sorted((found.lower(), label.lower()), key=len)
    return short in long and len(short) >= 0.5 * len(long)


def _shown(fact: OutsideFact) -> str:
    return f"{fact.text} => {fact.code}" if fact.code else fact.text


def _score(items: list[dict[str, Any]], transcripts: dict[tuple[str, str], Transcript]) -> dict[str, Counter[str]]:
    """Per kind: true positives, false positives and misses over ``items``."""
    scores: dict[str, Counter[str]] = {kind: Counter() for kind in OUTSIDE_KINDS}
    facts_of: dict[tuple[str, str], list[OutsideFact]] = {}
    for item in items:
        key = (item["corpus"], item["transcript"])
        if key not in facts_of:
            facts_of[key] = outside_facts(transcripts[key].messages)
        for kind in item["kinds"]:
            found = [_shown(f) for f in facts_of[key] if f.index == item["index"] and f.kind == kind]
            used: set[int] = set()
            for label in item["facts"].get(kind, ()):
                hit = next((i for i, text in enumerate(found) if i not in used and _matches(kind, text, label)), None)
                if hit is None:
                    scores[kind]["missed"] += 1
                else:
                    used.add(hit)
                    scores[kind]["right"] += 1
            scores[kind]["wrong"] += len(found) - len(used)
    return scores


def _rates(counts: Counter[str]) -> tuple[float, float]:
    right = counts["right"]
    return right / max(right + counts["wrong"], 1), right / max(right + counts["missed"], 1)


@pytest.fixture(scope="module")
def labelled() -> tuple[list[dict[str, Any]], dict[tuple[str, str], Transcript]]:
    if corpus_dir() is None:
        pytest.skip("corpus not found (CONCORD_CORPUS_DIR)")
    items = json.loads(SAMPLE.read_text(encoding="utf-8"))["items"]
    wanted = {(item["corpus"], item["transcript"]) for item in items}
    transcripts = {(t.corpus, t.name): t for t in iter_transcripts(kinds=sorted({c for c, _ in wanted}))
                   if (t.corpus, t.name) in wanted}
    for item in items:
        message = transcripts[item["corpus"], item["transcript"]].messages[item["index"]]
        digest = hashlib.sha256(message_text(message).encode()).hexdigest()[:16]
        assert digest == item["sha256"], f"{item['id']}: the corpus message changed; label the sample again"
    return items, transcripts


def test_precision_and_recall_on_the_labelled_sample(
        labelled: tuple[list[dict[str, Any]], dict[tuple[str, str], Transcript]]) -> None:
    items, transcripts = labelled
    fresh = [item for item in items if item["id"].startswith("D")]
    for part, floors, enough in ((items, FLOOR, 20), (fresh, FRESH_FLOOR, 3)):
        scores = _score(part, transcripts)
        for kind, (precision_floor, recall_floor) in floors.items():
            assert sum(scores[kind].values()) >= enough, (kind, scores[kind])  # enough labels to mean something
            precision, recall = _rates(scores[kind])
            assert precision >= precision_floor and recall >= recall_floor, (kind, precision, recall, scores[kind])


def _kinds(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for fact in outside_facts(messages):
        found.setdefault(fact.kind, []).append(_shown(fact))
    return found


def test_rules_in_passing_and_not_narration() -> None:
    found = _kinds([{"role": "user", "content": (
        "Fix the login bug, but don't touch the migrations. Please always run the linter first. "
        "We never push to main. Make sure the tests pass before you merge, and tag the release. "
        "I don't know why it broke. I never liked that module. It must be the cache. Never mind. "
        "Should we always rebase?")}])
    assert found["rule"] == ["don't touch the migrations", "always run the linter first", "We never push to main",
                             "Make sure the tests pass before you merge"]
    # An assistant's or a tool's text states no user rule.
    assert "rule" not in _kinds([{"role": "assistant", "content": "Never push to main."}])


def test_errors_of_a_failed_run() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(
        {"command": "pytest -q tests/test_x.py\necho done"})}}
    output = ("<returncode>1</returncode>\nTraceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n"
              "    main()\n    ^^^^^^\ndjango.core.exceptions.ImproperlyConfigured: no settings\n"
              "FAILED tests/test_x.py::test_y - AssertionError: 1 != 2\nFAIL: test_z (pkg.tests.Case)\n"
              "E       AssertionError: expected 3\nsrc/a.c:3:1: error: expected ';'\n"
              "bash: nvcc: command not found\nall good: 3 passed")
    found = _kinds([{"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": output}])
    assert found["command"] == ["pytest -q tests/test_x.py"]
    assert found["error"] == ["pytest -q tests/test_x.py => 1", "django.core.exceptions.ImproperlyConfigured: no settings",
                              "tests/test_x.py::test_y", "FAIL: test_z (pkg.tests.Case)", "AssertionError: expected 3",
                              "src/a.c:3:1: error: expected ';'", "bash: nvcc: command not found"]


def test_paths_numbers_and_typed_commands() -> None:
    found = _kinds([{"role": "user", "content": (
        "nick: sudo apt-get install samba\nsee /etc/samba/smb.conf and `src/app.py:42`, not and/or or "
        "https://x.org/a/b or /join; it took 15 minutes, 3.2GB and $1,200 at 45% [100%]")}])
    assert found["command"] == ["sudo apt-get install samba"]
    assert found["path"] == ["/etc/samba/smb.conf", "src/app.py"]
    assert found["number"] == ["15 minutes", "3.2GB", "$1,200", "45%"]
