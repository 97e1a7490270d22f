"""The evidence ledger: bounded newest first, one fixed format for LLM and static summaries, carried over."""

from __future__ import annotations

import json

from agent.compression.evidence import Fact
from agent.compression.ledger import (
    coverage_line,
    ledger_line,
    parse_coverage,
    parse_ledger,
    select_facts,
    with_ledger,
)
from agent.compression.summary import summary_body
from agent.tokens import get_counter
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
    # messages[0] is the system prompt (not stored), messages[1] is #500; the path is last seen in the
    # test output of messages[7].
    assert Fact("path", "tests/test_m1.py", 506) in facts
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
    assert Fact("path", "tests/test_m1.py", 506) in kept
    assert any(f.seq >= 1_000 for f in kept)
