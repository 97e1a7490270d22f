"""bench.reachability scoring on a synthetic transcript: facts at risk, kept by the ledger, reachable by topic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from agent.compression.evidence import Fact
from bench._reach_probe import Probe, is_kept, ledger_probes
from bench.corpus import Transcript
from bench.reachability import held_out, measure_transcript, topic_query
from gateway.store import Store


def _transcript() -> Transcript:
    # About 25K tokens: compressed in a window of its own size, the summary's budget (and the ledger's cap with
    # it) is 2,000 tokens, which holds (nearly) every fact; a smaller window gives the ledger less room.
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(60):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"pytest tests/test_mod{i}.py"})}}
        messages += [
            {"role": "user", "content": f"Step {i}: investigate the flaky scheduler number {i} " + "filler " * 400},
            {"role": "assistant", "content": f"Looking at stage {i}.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}",
             "content": f"collected 3 items in src/sched/mod{i}.py\nKeyError: 'shard_{i}' while rebalancing cluster{i}\nexit code 1"},
        ]
    messages[4] = {"role": "user", "content": "Never restart the primary without asking. Also, reindex nightly."}
    return Transcript("claude_code", "synthetic", messages)


def test_probe_and_topic_query_never_use_the_fact_itself() -> None:
    probes = ledger_probes([Fact("command", "pytest -q → exit 1", 3), Fact("error", "ValueError: long…", 3),
                            Fact("constraint", "never push", 4)])
    assert [(p.kind, p.text) for p in probes] == [("command", "pytest -q"), ("error", "ValueError: long"),
                                                 ("rule", "never push")]
    frequency = Counter({"rebalancing": 5, "cluster": 1, "while": 9})
    query = topic_query("KeyError: 'shard_3' while rebalancing cluster", "KeyError: 'shard_3'", frequency)
    assert query == "cluster rebalancing"
    assert topic_query("KeyError: 'shard_3'", "KeyError: 'shard_3'", frequency) == ""


async def test_facts_of_the_compacted_middle_are_kept_and_reachable(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/reach.db")
    try:
        scored = await measure_transcript(store, _transcript(), sample=10)
    finally:
        await store.aclose()
    assert scored.tokens_after < scored.tokens_before
    for fact_set in ("ledger", "outside"):
        for kind in ("command", "path", "error", "rule"):
            cell = scored.cells[fact_set][kind]
            assert cell.facts > 0, (fact_set, kind)
            assert cell.kept >= 0.8 * cell.facts, (fact_set, kind)  # the bounded ledger kept (nearly) all of them
            assert cell.exact == cell.facts, (fact_set, kind)       # the store finds each by its exact text
            assert cell.reachable == cell.facts, (fact_set, kind)   # what the ledger dropped, a topic search reaches


def test_a_command_that_failed_is_kept_only_with_its_exit_code() -> None:
    probe = Probe("error", "pytest -q", 7, code="2", status="<returncode>2</returncode>")
    lines = ["- #7 cmd: pytest -q → exit 2"]
    assert is_kept(probe, lines[0], lines)
    assert not is_kept(probe, "- #7 cmd: pytest -q → exit 1", ["- #7 cmd: pytest -q → exit 1"])
    assert not is_kept(probe, "pytest -q\nexit 2", ["pytest -q", "exit 2"])


def test_the_held_out_third_is_fixed_by_name() -> None:
    names = [Transcript("irc", f"log{i}", []) for i in range(300)]
    chosen = [t.name for t in names if held_out(t)]
    assert 70 < len(chosen) < 130
    assert chosen == [t.name for t in names if held_out(Transcript("irc", t.name, [{"role": "user"}]))]
