"""A compaction racing one from another process (system-cron sweep without a shared Redis lock) loses nothing."""

from __future__ import annotations

from typing import Any

from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


async def test_hygiene_losing_a_race_keeps_the_other_version_and_the_users_message(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    history = chatter(400, words=60)
    session_id = await bulk_session(gateway, "dm:c1", history, last_prompt_tokens=170_000)
    answer_by_kind(fake_llm, "fresh answer")
    store = gateway.rt.store
    ours = store.compactions.replace_active

    async def other_process_wins_first(sid: str, *args: Any, **kwargs: Any) -> int:
        store.compactions.replace_active = ours  # race only once
        other = await Store.open(gateway.rt.settings.storage.url, migrate=False)
        try:
            active = await other.messages.load_active(sid)
            kept = [{"role": "user", "content": "[summary written by the cron sweep]"}, *active.messages[-4:]]
            await other.compactions.replace_active(sid, kept, [10] * len(kept), active.watermark, reason="sweep")
        finally:
            await other.aclose()
        return await ours(sid, *args, **kwargs)

    store.compactions.replace_active = other_process_wins_first  # type: ignore[method-assign]
    await adapter.say("what did we decide about the cache?")

    assert adapter.texts()[-1] == "fresh answer"
    active = (await store.messages.load_active(session_id)).messages
    assert active[0]["content"] == "[summary written by the cron sweep]"
    assert (active[-2]["role"], active[-2]["content"]) == ("user", "what did we decide about the cache?")
    assert active[-1]["content"] == "fresh answer"
    # Every original message is still stored (archived by the winning compaction).
    everything = [r.message for r in await store.messages.export(session_id, include_archived=True)]
    assert all(m in everything for m in history)
    assert [h.reason for h in await store.compactions.history(session_id)] == ["sweep"]
