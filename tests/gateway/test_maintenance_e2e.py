"""Idle expiry with a fast clock, and the hygiene sweep compressing exactly the sessions over a limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from gateway.conversation.hygiene import REASON_MESSAGES, REASON_TOKENS
from gateway.conversation.sweep import expire_idle, print_sweep_report, sweep
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


class FastClock:
    """A wall clock the test moves forward."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


async def test_idle_sessions_end_and_the_next_message_starts_a_new_one_with_a_note(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    clock = FastClock()
    gateway, adapter = await gateway_factory(clock=clock, gateway={"idle_expiry_minutes": 30})
    await adapter.say("first conversation")
    old = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    clock.offset = timedelta(minutes=29)
    assert await expire_idle(gateway.sessions) == []
    clock.offset = timedelta(minutes=31)
    assert await expire_idle(gateway.sessions) == [old.id]
    ended = await gateway.rt.store.sessions.get(old.id)
    assert ended.end_reason == "idle" and ended.message_count == 2  # history kept
    await adapter.say("back again")
    new = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert new.id != old.id
    sent = fake_llm.requests[-1].messages
    assert [m["role"] for m in sent] == ["system", "user"]  # the old turns are not replayed
    assert sent[-1]["content"].startswith("[Continuity note: this chat's previous session ended")
    assert sent[-1]["content"].endswith("back again")
    await adapter.say("and again")
    assert "Continuity note" not in fake_llm.requests[-1].messages[-1]["content"]  # once only


async def test_idle_expiry_is_off_when_unset(gateway_factory: GatewayFactory) -> None:
    clock = FastClock()
    gateway, adapter = await gateway_factory(clock=clock)
    await adapter.say("hello")
    clock.offset = timedelta(days=30)
    assert await expire_idle(gateway.sessions) == []
    assert gateway.scheduler.job_ids == ["delivery-recovery", "inbox-recovery"]  # the recoveries always run


async def test_sweep_compresses_exactly_the_sessions_over_a_limit(gateway_factory: GatewayFactory,
                                                                   fake_llm: FakeLLMServer) -> None:
    gateway, _ = await gateway_factory(llm={"context_length": 8_000},
                                       gateway={"hygiene_hard_message_limit": 30})
    over_count = await bulk_session(gateway, "dm:a", chatter(31, words=100))
    under = await bulk_session(gateway, "dm:b", chatter(30, words=100))
    over_tokens = await bulk_session(gateway, "dm:c", chatter(28, words=100), last_prompt_tokens=7_000)
    quiet = await bulk_session(gateway, "dm:d", chatter(4, words=20), last_prompt_tokens=500)
    kinds = answer_by_kind(fake_llm)

    dry = await sweep(gateway.sessions, dry_run=True)
    assert {e.session_id for e in dry.entries} == {over_count, over_tokens}
    assert kinds == [] and dry.compressed == 0

    progress: list[tuple[int, int]] = []
    report = await sweep(gateway.sessions, progress=lambda done, total: progress.append((done, total)))
    assert {e.session_id: e.outcome for e in report.entries} == {over_count: "compressed",
                                                                  over_tokens: "compressed"}
    assert {e.session_id: e.reason for e in report.entries} == {over_count: REASON_MESSAGES,
                                                                 over_tokens: REASON_TOKENS}
    assert progress == [(1, 2), (2, 2)] and kinds == ["summary", "summary"]
    for session_id in (under, quiet):
        assert await gateway.rt.store.compactions.history(session_id) == []
    again = await sweep(gateway.sessions)
    assert again.entries == []  # nothing left over a limit

    console = Console(record=True, width=200)
    print_sweep_report(report, console)
    text = console.export_text()
    assert over_count in text and "2 compressed, 0 failed" in text


async def test_a_sweep_does_nothing_while_another_process_sweeps(gateway_factory: GatewayFactory,
                                                                 fake_llm: FakeLLMServer) -> None:
    """Another sweeper holds the sweep's job lock (a worker's scheduled sweep, or `concord sweep`): this one
    neither compresses nor calls the model, and its report says why; a dry run still lists the candidates."""
    gateway, _ = await gateway_factory(llm={"context_length": 8_000}, gateway={"hygiene_hard_message_limit": 30})
    over = await bulk_session(gateway, "dm:a", chatter(31, words=100))
    kinds = answer_by_kind(fake_llm)
    async with gateway.rt.locks.try_job_lock("hygiene-sweep") as held:
        assert held
        busy = await sweep(gateway.sessions)
        dry = await sweep(gateway.sessions, dry_run=True)
    assert busy.running_elsewhere and busy.entries == [] and kinds == []
    assert [e.session_id for e in dry.entries] == [over]
    console = Console(record=True, width=200)
    print_sweep_report(busy, console)
    assert "Another process is sweeping right now" in console.export_text()
    assert (await sweep(gateway.sessions)).compressed == 1  # the lock was let go
