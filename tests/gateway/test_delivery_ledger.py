"""The delivery ledger through the real gateway: an answer is stored before it is sent and marked sent after;
one the platform never confirmed is sent again, once, by this worker or another, and marked recovered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapters.base import ChatRef, SendError
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


class Refusing(ScriptedAdapter):
    """A platform that can be made to refuse every send (a crash before its confirmation looks the same to
    the ledger: the answer stays pending)."""

    refuse = False

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        if self.refuse:
            raise SendError("platform unreachable")
        await super()._send_chunk(chat, text, reply_to)


async def test_answers_are_recorded_then_confirmed(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("first answer")
    await adapter.say("hello")
    assert adapter.texts() == ["first answer"]
    assert await gateway.rt.store.deliveries.counts() == {"sent": 1}
    delivery = await gateway.rt.store.deliveries.get(1)
    assert delivery is not None and delivery.reply_to == "1" and delivery.worker == gateway.rt.worker_id
    assert delivery.session_id == (await gateway.rt.store.sessions.get_active("discord", "dm:c1")).id  # type: ignore[union-attr]


async def test_an_unconfirmed_answer_is_resent_once_by_another_worker(gateway_factory: GatewayFactory,
                                                                      fake_llm: FakeLLMServer) -> None:
    clock = Clock()
    first, _ = await gateway_factory(clock=clock, gateway={"worker_id": "worker-a"})
    lost = Refusing()
    await lost.start(lambda m: first.router.handle(m, lost))
    lost.refuse = True
    fake_llm.reply("the answer that got lost")
    await lost.say("question")
    assert lost.sent == []
    assert await first.rt.store.deliveries.counts() == {"pending": 1}

    second, other = await gateway_factory(clock=clock, gateway={"worker_id": "worker-b"})
    await second.recover_deliveries()
    assert other.sent == []  # too fresh: its sender may still be trying
    clock.offset = timedelta(seconds=121)
    await second.recover_deliveries()
    await second.recover_deliveries()  # once only
    assert [(chat.chat_id, text, reply) for chat, text, reply in other.sent] == [
        ("c1", "the answer that got lost", "1")]
    delivery = await second.rt.store.deliveries.get(1)
    assert delivery is not None and delivery.status == "sent" and delivery.recovered_by == "worker-b"
    assert delivery.worker == "worker-a"
    assert second.rt.metrics.instruments.redelivered.labels("sent")._value.get() == 1


async def test_a_failed_resend_is_given_up_and_old_answers_expire(gateway_factory: GatewayFactory,
                                                                  fake_llm: FakeLLMServer) -> None:
    clock = Clock()
    gateway, _ = await gateway_factory(clock=clock)
    adapter = Refusing()
    await adapter.start(lambda m: gateway.router.handle(m, adapter))
    gateway._started = [adapter]  # this worker serves that platform
    adapter.refuse = True
    await adapter.say("one")
    clock.offset = timedelta(minutes=3)
    await gateway.recover_deliveries()
    assert await gateway.rt.store.deliveries.counts() == {"failed": 1}
    await adapter.say("two")
    clock.offset += timedelta(hours=2)
    adapter.refuse = False
    await gateway.recover_deliveries()
    assert adapter.sent == []  # an answer two hours late is not sent
    assert await gateway.rt.store.deliveries.counts() == {"failed": 1, "expired": 1}


async def test_answers_no_longer_pending_are_forgotten_after_keep_seconds(gateway_factory: GatewayFactory,
                                                                           fake_llm: FakeLLMServer) -> None:
    clock = Clock()
    gateway, _ = await gateway_factory(clock=clock, delivery={"keep_seconds": 86_400})
    adapter = Refusing()
    await adapter.start(lambda m: gateway.router.handle(m, adapter))
    gateway._started = [adapter]
    await adapter.say("sent at once")
    adapter.refuse = True
    await adapter.say("left pending")
    assert await gateway.rt.store.deliveries.counts() == {"sent": 1, "pending": 1}
    clock.offset = timedelta(hours=23)
    await gateway.recover_deliveries()  # the pending one is too old to send: expired, and both are kept a day
    assert await gateway.rt.store.deliveries.counts() == {"sent": 1, "expired": 1}
    clock.offset = timedelta(hours=25)
    await gateway.recover_deliveries()
    assert await gateway.rt.store.deliveries.counts() == {}
