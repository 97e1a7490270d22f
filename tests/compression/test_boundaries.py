"""Stage 2 boundaries (R-C2)."""

from __future__ import annotations

from agent.compression.boundaries import (
    align_backward,
    align_forward,
    find_boundaries,
    find_tail_cut,
    head_size,
    min_tail_count,
    protect_anchors,
)
from agent.tokens import get_counter
from tests.compression.helpers import assistant, call, result, system, user

COUNTER = get_counter()


def test_min_tail_worked_number() -> None:
    assert min_tail_count(30, 4, 20) == 8
    assert min_tail_count(30, 4, 2) == 3
    assert min_tail_count(30, 4, 5) == 5
    assert min_tail_count(6, 4, 20) == 2, "never more than what follows the head"


def test_head_is_system_plus_first_n_then_decays_to_system_only() -> None:
    messages = [system(), user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    assert head_size(messages, 3, decayed=False) == 4
    assert head_size(messages, 3, decayed=True) == 1
    assert head_size(messages[1:], 3, decayed=True) == 0


def test_head_aligns_forward_past_tool_results() -> None:
    messages = [system(), user("a"), call("c1", "t", {}), result("c1", "r"), result("c1", "r2"), user("b")]
    assert align_forward(messages, 3) == 5


def test_tail_cut_moves_before_the_parent_assistant() -> None:
    messages = [system(), user("a"), call("c1", "t", {}), result("c1", "r"), user("b")]
    assert align_backward(messages, 3, head_end=1) == 2
    orphan = [system(), user("a"), result("zz", "r"), user("b")]
    assert align_backward(orphan, 2, head_end=1) == 2
    assert align_backward(messages, 5, head_end=1) == 5


def test_anchors_pull_the_cut_earlier() -> None:
    messages = [system(), user("old"), assistant("visible reply"), user("live ask"),
                call("c1", "t", {}), result("c1", "r"), call("c2", "t", {}), result("c2", "r")]
    assert protect_anchors(messages, 6, head_end=1) == 2


def test_soft_ceiling_then_plain_budget_redo() -> None:
    messages = [system()] + [user("w" * 200) for _ in range(9)]
    per = COUNTER.count_message(messages[1])
    # Everything after the head fits 1.5x the budget, so the walk is redone with the plain budget.
    cut = find_tail_cut(messages, 1, tail_budget=per * 6, min_tail=3, counter=COUNTER)
    assert cut == 10 - 6
    # When it does not all fit, the soft ceiling (1.5x) applies.
    cut = find_tail_cut(messages, 1, tail_budget=per * 4, min_tail=3, counter=COUNTER)
    assert cut == 10 - 6


def test_min_tail_wins_over_the_token_budget() -> None:
    messages = [system()] + [user("w" * 2_000) for _ in range(12)]
    assert find_tail_cut(messages, 1, tail_budget=10, min_tail=8, counter=COUNTER) == 13 - 8


def test_find_boundaries_empty_when_everything_fits() -> None:
    messages = [system(), user("a"), assistant("b"), user("c"), assistant("d"), user("e"), assistant("f")]
    bounds = find_boundaries(messages, protect_first_n=3, decayed=False, protect_last_n=20,
                             tail_budget=100_000, counter=COUNTER)
    assert bounds.empty


def test_find_boundaries_keeps_groups_and_live_request() -> None:
    messages = [system()]
    for i in range(12):
        messages += [user(f"ask {i}"), call(f"c{i}", "terminal", {"command": "x"}), result(f"c{i}", "o" * 800)]
    messages.append(assistant("final words"))
    bounds = find_boundaries(messages, protect_first_n=3, decayed=True, protect_last_n=4,
                             tail_budget=600, counter=COUNTER)
    assert bounds.head_end == 1
    tail = messages[bounds.tail_start :]
    assert tail[0]["role"] != "tool"
    assert messages[-2] in tail and messages[-4] in tail, "last user message is in the tail"
    assert not bounds.empty
