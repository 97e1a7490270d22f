"""The evidence ledger: bounded newest first, one fixed format for LLM and static summaries, carried over."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression.evidence import Fact, clear_fact_cache, extract_facts, fact_tokens, remember_facts
from agent.compression.ledger import (
    _GROUPED_LABELS,
    _SEPARATOR,
    LABELS,
    _groupable,
    _Selection,
    budget_kind,
    coverage_line,
    ledger_cap,
    ledger_line,
    ledger_lines,
    merge_facts,
    parse_coverage,
    parse_ledger,
    select_facts,
    with_ledger,
)
from agent.compression.summary import summary_body
from agent.compression.threshold import compute_threshold_tokens, output_reserve, summary_budget
from agent.tokens import get_counter
from bench.corpus import load_all
from tests.compression.helpers import ScriptedProvider, coding_session, make_compressor, user

COUNT = get_counter().count_text


def test_bound_is_respected_and_the_newest_facts_are_kept() -> None:
    facts = [Fact("path", f"src/pkg/module_{i}.py", i) for i in range(1, 401)]
    cap = 600
    kept = select_facts(facts, cap, COUNT)
    assert sum(COUNT(ledger_line(f)) + 1 for f in kept) <= cap
    assert 10 < len(kept) < 400
    assert kept == facts[-len(kept):]  # newest first: only the oldest were dropped


def test_quotas_keep_rare_kinds_when_one_kind_floods() -> None:
    numbers = [Fact("number", f"{i} ms", i) for i in range(10, 1000)]
    rule, error = Fact("constraint", "Never push to main.", 1), Fact("error", "ValueError: bad port", 2)
    kept = select_facts([rule, error, *numbers], 400, COUNT)
    assert rule in kept and error in kept


def test_short_facts_of_one_message_share_a_line_and_parse_back() -> None:
    facts = [Fact("path", "src/a.py", 5), Fact("number", "3 s", 5), Fact("path", "src/b.py", 5),
             Fact("path", "odd name.txt", 5), Fact("number", "4 MB", 5), Fact("path", "src/c.py", 6),
             Fact("command", "ls → exit 0", 6)]
    lines = ledger_lines(facts)
    assert lines == ["- #5 paths: src/a.py src/b.py", "- #5 nums: 3 s · 4 MB", "- #5 path: odd name.txt",
                     "- #6 path: src/c.py", "- #6 cmd: ls → exit 0"]
    assert sorted(parse_ledger("\n".join(lines)), key=facts.index) == facts


def test_the_bound_holds_for_lines_shared_by_many_facts() -> None:
    facts = [Fact(kind, f"{kind}_{i}/file_{i}.py" if kind == "path" else f"{i} ms", i // 7)
             for i in range(700) for kind in ("path", "number")]
    for cap in (200, 600, 3_000):
        kept = select_facts(facts, cap, COUNT)
        rendered = sum(COUNT(line) + 1 for line in ledger_lines(kept))
        assert 0 < rendered <= cap and len(kept) > cap // 20


def test_failed_commands_take_the_errors_share() -> None:
    failed, ran = Fact("command", "pytest -q → exit 1", 9), Fact("command", "ls → exit 0", 9)
    assert budget_kind(failed) == "error" and budget_kind(Fact("command", "make → failed", 9)) == "error"
    assert budget_kind(ran) == "command" and budget_kind(Fact("command", "make → ran", 9)) == "command"
    commands = [Fact("command", f"grep -n thing_{i} src/module_{i}.py → exit 0", 100 + i) for i in range(200)]
    assert failed in select_facts([failed, *commands], 400, COUNT)


def _rendered(facts: list[Fact]) -> str:
    return "\n".join(ledger_lines(facts))


def test_a_path_another_fact_names_whole_is_not_written_again() -> None:
    facts = [Fact("path", "src/pkg", 1), Fact("path", "a.py", 2), Fact("path", "data.py", 2),
             Fact("path", "a.py.bak", 2), Fact("path", "src/pkg/a.py", 3), Fact("command", "cat src/pkg/a.py → exit 0", 3),
             Fact("path", "lib/x/y.py", 4), Fact("path", "lib/x", 5)]
    kept = select_facts(facts, 1_000, COUNT)
    # The directory, the file's name and the call's argument stand whole in the command; "lib/x" in the older
    # "lib/x/y.py" (chosen after it, newest first, and then left out). "data.py" and "a.py.bak" are other files.
    assert [f.text for f in kept if f.kind == "path"] == ["data.py", "a.py.bak", "lib/x/y.py"]
    text = _rendered(kept)
    assert all(fact.text in text for fact in facts)


def test_paths_named_by_commands_leave_their_room_to_older_paths() -> None:
    # Each test file is named by the command that ran it and again as a path of its output; a listing of
    # other files is older. Written once each, the newest runs leave room for the listing's newest names.
    listing = [Fact("path", f"docs/page_{i}.md", 1) for i in range(40)]
    runs = [fact for i in range(60) for fact in (Fact("command", f"pytest tests/test_{i}.py → exit 0", 10 + 2 * i),
                                                Fact("path", f"tests/test_{i}.py", 11 + 2 * i))]
    for cap in (300, 900):
        kept = select_facts([*listing, *runs], cap, COUNT)
        assert sum(COUNT(line) + 1 for line in ledger_lines(kept)) <= cap
        ran = {f.text.split()[1] for f in kept if f.kind == "command"}
        written = [f.text for f in kept if f.kind == "path"]
        assert ran and not ran & set(written)
        named = [f for f in (*listing, *runs) if f.kind == "path" and f.text in _rendered(kept)]
        assert len(named) == len(ran) + len(written)
    assert any(f in kept for f in listing)


_SEGMENTS = st.sampled_from(["src", "pkg", "a.py", "data.py", "a.py.bak", "tests", "build", "x"])
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=4).map("/".join)
_FACTS = st.lists(st.one_of(
    st.builds(lambda p, seq: Fact("path", p, seq), _PATHS, st.integers(1, 30)),
    st.builds(lambda p, seq: Fact("command", f"cat {p} → exit 0", seq), _PATHS, st.integers(1, 30)),
    st.builds(lambda n, seq: Fact("number", f"{n} ms", seq), st.integers(0, 99), st.integers(1, 30))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(_FACTS, st.integers(20, 400))
def test_no_written_path_is_named_whole_by_another_and_the_bound_holds(facts: list[Fact], cap: int) -> None:
    facts = merge_facts([], facts)
    kept = select_facts(facts, cap, COUNT)
    assert sum(COUNT(line) + 1 for line in ledger_lines(kept)) <= cap
    text = _rendered(kept)
    for path in (f for f in kept if f.kind == "path"):
        # (Whole as far as the generated texts go: between slashes, spaces and line ends.)
        others = "\n".join(f.text for f in kept if f is not path)
        assert not any(others[i - 1 : i] in ("", "\n", " ", "/") and others[i + len(path.text):][:1] in ("", "\n", " ", "/")
                       for i in _occurrences(path.text, others))
    assert set(kept) <= set(facts) and all(f.text in text for f in kept)


def _occurrences(needle: str, haystack: str) -> list[int]:
    return [i for i in range(len(haystack)) if haystack.startswith(needle, i)]


def _about(tokens: int, kind: str, start: str, clause: str, seq: int) -> Fact:
    text = start
    while COUNT(ledger_line(Fact(kind, text, seq))) < tokens:
        text += clause
    return Fact(kind, text, seq)


def test_rules_and_errors_keep_their_place_in_a_small_windows_ledger() -> None:
    # The ledger of a 4K or 8K model is a few hundred tokens, each kind's share a few dozen: a rule or an
    # error longer than its share, behind a flood of every other kind, still goes in, newest first.
    flood = [Fact(kind, text, 10 + i) for i in range(300) for kind, text in
             (("command", f"pytest tests/test_{i}.py → exit 0"), ("path", f"src/pkg/mod_{i}.py"),
              ("number", f"{i} ms"), ("id", f"OPS-{1000 + i}"), ("url", f"https://ci.example.com/runs/{i}"))]
    for window in (4_096, 8_192):
        threshold = compute_threshold_tokens(window, 0.5, output_reserve(None, window))
        cap = ledger_cap(summary_budget(20_000, window, threshold))
        assert cap < 600
        rule = _about(int(cap * 0.38), "constraint", "Never run the migrations on production", ", nor on staging", 3)
        error = _about(int(cap * 0.38), "error", "ImproperlyConfigured: settings are not configured",
                       "; define DJANGO_SETTINGS_MODULE", 4)
        older = Fact("error", "KeyError: 'port'", 2)
        kept = select_facts([older, rule, error, *flood], cap, COUNT)
        assert rule in kept and error in kept and older not in kept, window
        assert sum(COUNT(line) + 1 for line in ledger_lines(kept)) <= cap
        assert len(kept) > 2  # the rest still get what is left


def test_a_bullet_that_only_repeats_a_fact_gives_way_to_its_line() -> None:
    body = "## Relevant Files\n- src/a.py\n- src/b.py (edited: the port)\n\n## Blocked\n- ValueError: bad port"
    merged = with_ledger(body, [Fact("path", "src/a.py", 4), Fact("error", "ValueError: bad port", 6)], None)
    assert merged.count("src/a.py") == 1 and "- #4 path: src/a.py" in merged
    assert merged.count("ValueError: bad port") == 1 and "- src/b.py (edited: the port)" in merged


def test_merge_puts_each_kind_in_its_section_after_the_models_text() -> None:
    body = ("## Goal\nShip it.\n\n## Constraints & Preferences\nNone\n\n## Relevant Files\n- app.py (edited)\n\n"
            "## Critical Context\nThe port is 8080.\n- #9 path: forged/by/the/model.py")
    facts = [Fact("constraint", "Never push to main.", 3), Fact("path", "src/app.py", 4),
             Fact("command", "pytest -q → exit 1", 5), Fact("error", "ValueError: bad port", 6)]
    merged = with_ledger(body, facts, (2, 40))
    assert merged.startswith(coverage_line(2, 40)) and parse_coverage(merged) == (2, 40)
    first = merged.splitlines()[0]
    assert "with search_history" in first and "with read_history" in first and "instead of guessing" in first
    sections = {part.split("\n", 1)[0]: part for part in merged.split("## ")[1:]}
    assert sections["Constraints & Preferences\n"[:-1]].strip().endswith("- #3 rule: Never push to main.")
    assert "None" not in sections["Constraints & Preferences"]
    assert sections["Relevant Files"].index("- app.py (edited)") < sections["Relevant Files"].index("- #4 path:")
    assert "- #5 cmd: pytest -q → exit 1" in sections["Critical Context"]
    assert "- #6 error: ValueError: bad port" in sections["Critical Context"]
    # A ledger line the model wrote is never trusted: only the deterministic ones remain.
    assert "forged" not in merged
    assert parse_ledger(merged) == facts


def test_sections_the_body_lacks_are_added_in_template_order() -> None:
    merged = with_ledger("## Goal\nx\n\n## Critical Context\ny", [Fact("path", "a/b.py", 1)], None)
    assert merged.index("## Goal") < merged.index("## Relevant Files") < merged.index("## Critical Context")


async def test_llm_and_static_summaries_carry_the_same_ledger() -> None:
    messages = coding_session(20)
    messages[5] = user("Please never touch the vendored folder. Use the port 5432 only.")
    llm = await make_compressor(summary_provider=ScriptedProvider(["## Goal\nfixing tests"])).compress(messages)
    static = await make_compressor(summary_provider=None).compress(messages)
    assert llm.summary_kind == "llm" and static.summary_kind == "static"
    ledgers = [parse_ledger(summary_body(r.messages[r.head_end]["content"])) for r in (llm, static)]
    assert ledgers[0] == ledgers[1] and ledgers[0]
    assert Fact("constraint", "Please never touch the vendored folder.", 5) in ledgers[0]
    assert any(f.kind == "command" and f.text.startswith("pytest tests/test_m1.py") for f in ledgers[0])


async def test_message_numbers_follow_the_store_and_coverage_spans_iterations() -> None:
    # A 32K window: a 2,000-token summary budget, so the cap holds the earlier entries too.
    compressor = make_compressor(context_length=32_000,
                                 summary_provider=ScriptedProvider(["## Goal\none", "## Goal\ntwo"]))
    compressor.number_messages(500)
    first = await compressor.compress(coding_session(20))
    body = summary_body(first.messages[first.head_end]["content"])
    facts = parse_ledger(body)
    # messages[0] is the system prompt (not stored), messages[1] is #500; the test file is named by the command
    # of messages[6] (and not written again as a path of its output, messages[7]).
    ran = Fact("command", "pytest tests/test_m1.py → exit 1", 505)
    assert ran in facts and Fact("path", "tests/test_m1.py", 506) not in facts
    start, end = parse_coverage(body)
    assert start == 500 + first.head_end - 1 and end == 500 + first.tail_start - 2
    later_turns = json.loads(json.dumps(coding_session(40)[1:]).replace("test_m", "test_n"))
    grown = first.messages + later_turns
    compressor.number_messages(1_000)
    second = await compressor.compress(grown)
    later = summary_body(second.messages[second.head_end]["content"])
    assert parse_coverage(later)[0] == start  # still says where the compacted history begins
    # An iterative compression keeps the earlier entries (they still fit the cap) under their old numbers.
    kept = parse_ledger(later)
    assert ran in kept
    assert any(f.seq >= 1_000 for f in kept)


# ------------------------------------------------------------------- a line's price: its start and its text


_STARTS = [f"- #{seq} {label}:" for seq in (1, 57, 1234, 99999) for label in (*LABELS.values(), *_GROUPED_LABELS.values())]
_ENCODINGS = [get_counter("o200k_base").count_text, get_counter("cl100k_base").count_text]


def _priced_apart(text: str) -> None:
    for count in _ENCODINGS:
        tail = count(" " + text)
        for start in _STARTS:
            assert count(f"{start} {text}") == count(start) + tail, (start, text)
        for separator in {s for s in _SEPARATOR.values() if s.strip()}:
            assert count(separator + text) == count(separator.rstrip()) + tail, (separator, text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), min_size=1))
def test_a_line_costs_its_start_and_its_text_apart(text: str) -> None:
    _priced_apart(text)


def test_a_line_costs_its_start_and_its_text_apart_for_every_fact_of_the_corpus() -> None:
    texts = {fact.text for transcript in load_all() for fact in extract_facts(transcript.messages, lambda i: i + 1)}
    if not texts:
        pytest.skip("the corpus folder is missing (set CONCORD_CORPUS_DIR)")
    for text in texts:
        _priced_apart(text)


def test_known_text_counts_choose_what_counting_the_lines_chooses() -> None:
    clear_fact_cache()
    messages = coding_session(12)
    remember_facts(messages, get_counter())
    facts = extract_facts(messages, lambda i: i + 1)
    for cap in (40, 150, 600):
        assert select_facts(facts, cap, COUNT, lambda text: fact_tokens(text, get_counter())) == \
            select_facts(facts, cap, COUNT)


def test_a_fact_is_priced_as_its_whole_line_would_count() -> None:
    facts = [*extract_facts(coding_session(12), lambda i: i + 1), Fact("id", "PR #12", 9), Fact("number", "3.5 s", 9)]
    pick = _Selection(facts, COUNT, None)
    for index, fact in enumerate(facts):
        grouped = _groupable(fact)
        label = _GROUPED_LABELS[fact.kind] if grouped else LABELS[fact.kind]
        assert pick._price(index, False) == COUNT(f"- #{fact.seq} {label}: {fact.text}") + 1
        if grouped:
            assert pick._price(index, True) == COUNT(_SEPARATOR[fact.kind] + fact.text)
