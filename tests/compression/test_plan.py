"""Planning one compaction: escalation when the result would leave no room, the live message whole."""

from __future__ import annotations

import dataclasses

from agent.compression.escalation import PLANNED_MAX, POST_COMPACTION_SHARE, escalation
from agent.compression.plan import PlanSettings, live_limit, make_plan, select_plan
from agent.compression.threshold import compute_threshold_tokens, output_reserve, tail_token_budget
from agent.tokens import get_counter
from tests.compression.helpers import assistant, coding_session, system, user

COUNTER = get_counter()


def _settings(window: int, overhead: int = 0) -> PlanSettings:
    reserve = output_reserve(None, window) or 0
    threshold = compute_threshold_tokens(window, 0.5, reserve)
    return PlanSettings(window, threshold, tail_token_budget(threshold, 0.2), 3, 20, reserve, overhead, 130)


def _chat(pairs: int, words: int) -> list[dict[str, str]]:
    prose = " ".join(f"w{k}" for k in range(words))
    return [system("You help."), *[m for i in range(pairs) for m in (user(f"q{i} {prose}"), assistant(f"a{i} {prose}"))]]


def test_the_live_message_may_take_what_the_window_leaves_it() -> None:
    small, large = _settings(4_096, overhead=400), _settings(200_000, overhead=856)
    # 4,096 less the answer (1,024), the margin, the system prompt, the tools and a summary's room.
    assert 1_500 < live_limit(small, 61) < 2_200
    assert live_limit(large, 61) > 160_000  # a 38K-token paste is far from it


def test_a_live_message_that_fits_stays_whole_and_an_old_one_like_it_is_clipped() -> None:
    settings = _settings(200_000, overhead=856)
    paste = " ".join(f"line{k}" for k in range(19_000))  # about 38,000 tokens: over 30% of the threshold
    messages = [*_chat(10, 300), user(paste)]
    plan = make_plan(messages, COUNTER.count_each(messages), settings, escalation(0), decayed=False, counter=COUNTER)
    assert plan.clip.clipped == 0 and plan.clip.messages[-1]["content"] == paste
    older = [*messages, assistant("read it"), user("next")]
    plan = make_plan(older, COUNTER.count_each(older), settings, escalation(0), decayed=False, counter=COUNTER)
    assert plan.clip.clipped == 1 and plan.clip.messages[-3]["content"] != paste


def test_a_plan_that_would_leave_too_little_room_starts_one_level_higher() -> None:
    settings = _settings(4_096, overhead=400)
    messages = _chat(20, 60)
    counts = COUNTER.count_each(messages)
    plain = make_plan(messages, counts, settings, escalation(0), decayed=False, counter=COUNTER)
    assert plain.predicted_request(settings) > settings.threshold_tokens * POST_COMPACTION_SHARE
    chosen = select_plan(messages, counts, settings, 0, decayed=False, counter=COUNTER)
    assert chosen.escalation.level == 1 <= PLANNED_MAX
    assert chosen.predicted_request(settings) < plain.predicted_request(settings)
    assert chosen.summary_budget == plain.summary_budget // 2
    # It never starts past the last level that keeps the reply before the live message on its own.
    assert select_plan(messages, counts, _settings(4_096, overhead=3_000), 0, decayed=False,
                       counter=COUNTER).escalation.level == PLANNED_MAX


def test_what_the_model_did_since_the_live_message_is_never_pruned() -> None:
    session = coding_session(20)
    live = max(i for i, m in enumerate(session) if m["role"] == "user")
    plan = make_plan(session, COUNTER.count_each(session), _settings(8_000), escalation(2), decayed=True,
                     counter=COUNTER)
    assert plan.pruned is not None and plan.pruned.messages[live:] == session[live:]
    assert plan.bounds is not None and plan.bounds.tail_start == live


def test_a_compaction_ahead_of_need_keeps_the_lead_less_tail_and_leaves_the_lead_more_room() -> None:
    settings = _settings(32_768)
    messages = _chat(60, 60)
    counts = COUNTER.count_each(messages)
    at_threshold = make_plan(messages, counts, settings, escalation(0), decayed=True, counter=COUNTER)
    lead = 1_000
    ahead = make_plan(messages, counts, dataclasses.replace(settings, lead=lead), escalation(0), decayed=True,
                      counter=COUNTER)
    assert at_threshold.bounds is not None and ahead.bounds is not None
    kept = sum(at_threshold.work_counts[at_threshold.bounds.tail_start:])
    kept_ahead = sum(ahead.work_counts[ahead.bounds.tail_start:])
    # The tail walk stops at the first message past its (soft) budget: within a message of the lead less.
    turn = max(counts[1:])
    assert kept - lead - 2 * turn <= kept_ahead <= kept - lead + 2 * turn
    assert ahead.middle_tokens > at_threshold.middle_tokens
    # A lead larger than the tail budget leaves the tail its minimum of messages, never none.
    whole = make_plan(messages, counts, dataclasses.replace(settings, lead=10 * settings.tail_budget), escalation(0),
                      decayed=True, counter=COUNTER)
    assert whole.bounds is not None and len(messages) - whole.bounds.tail_start >= 3


def test_ahead_of_need_the_plan_escalates_when_its_result_would_not_leave_the_lead_more_room() -> None:
    settings = _settings(32_768)
    messages = _chat(60, 60)
    counts = COUNTER.count_each(messages)
    plan = select_plan(messages, counts, settings, 0, decayed=True, counter=COUNTER)
    assert plan.escalation.level == 0
    room = settings.threshold_tokens * POST_COMPACTION_SHARE - plan.predicted_request(settings)
    # A lead the smaller tail cannot make up for (its minimum of messages stays): one level higher.
    lead = int(room) + 2 * settings.tail_budget
    ahead = dataclasses.replace(settings, lead=lead)
    assert select_plan(messages, counts, ahead, 0, decayed=True, counter=COUNTER).escalation.level == 1
