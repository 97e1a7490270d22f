"""bench.reachability scoring on a synthetic transcript: facts at risk, kept by the ledger, reachable by topic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from agent.compression.compressor import ContextCompressor
from agent.compression.evidence import Fact
from agent.compression.messages import plain_text
from agent.tokens import get_counter
from bench._independent_facts import outside_facts
from bench._reach_probe import Probe, flat, is_kept, ledger_probes, outside_probes
from bench.corpus import Transcript, iter_transcripts
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


async def _kept_outside_facts(transcript: Transcript) -> Counter[tuple[str, bool]]:
    """(kind, kept) counts of the outside facts a compaction of ``transcript`` (own-size window, static
    summary) puts at risk."""
    counter = get_counter()
    messages = transcript.messages
    compressor = ContextCompressor(context_length=max(counter.count_messages(messages), 4_000), summary_provider=None)
    result = await compressor.compress(messages, force=True)
    counts: Counter[tuple[str, bool]] = Counter()
    if not result.compressed:
        return counts
    middle = messages[result.head_end : result.tail_start]
    outside = flat("\n".join(plain_text(m) for m in (*messages[: result.head_end], *messages[result.tail_start :])))
    window_lines = [flat(line) for m in result.messages for line in plain_text(m).splitlines()]
    window = flat("\n".join(window_lines))
    for probe in outside_probes(outside_facts(middle), {i: i for i in range(len(middle))}):
        if len(probe.text) >= 3 and flat(probe.text) not in outside:
            counts[probe.kind, is_kept(probe, window, window_lines)] += 1
    return counts


async def test_the_ledger_keeps_the_error_lines_rules_and_commands_an_outside_reader_finds(corpus_root: Path) -> None:
    # Every fact of the kind, not a sample: the agent transcripts (error lines, failed commands) and the chat
    # logs (rules in passing, typed commands) of the part the ledger's patterns were worked out on.
    counts: Counter[tuple[str, bool]] = Counter()
    for transcript in iter_transcripts(corpus_root, kinds=["claude_code", "miniswe", "irc"]):
        if not held_out(transcript) and len(transcript.messages) <= 1_500:
            counts.update(await _kept_outside_facts(transcript))
    # (Before issue 31: errors 39%, rules 54%, commands 82%, paths 66%; now 89%, 97%, 95%, 84%.)
    for kind, floor in (("error", 0.85), ("rule", 0.93), ("command", 0.92), ("path", 0.8)):
        kept, lost = counts[kind, True], counts[kind, False]
        assert kept + lost >= 100, kind
        assert kept / (kept + lost) >= floor, (kind, kept, lost)
