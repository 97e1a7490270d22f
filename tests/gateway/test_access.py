"""Access control: the policy's verdicts, and the router acting on them (quiet in groups, one line in DMs,
pairing codes an admin approves with /approve, free-response chats)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from adapters.base import Inbound
from gateway.config import ConfigError, load_settings
from gateway.policy.access import AccessPolicy, Verdict
from gateway.policy.admission import PAIRING_TEXT, REFUSED_DM
from gateway.policy.pairing import Pairing
from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory


def _msg(chat_type: str = "group", *, platform: str = "discord", user: str = "42", chat: str = "3000",
         thread: str | None = None, guild: str | None = "2000", roles: tuple[str, ...] = ()) -> Inbound:
    return Inbound(platform=platform, chat_id=chat, chat_type=chat_type, thread_id=thread,  # type: ignore[arg-type]
                   user_id=user, user_name="x", message_id="1", text="hi", mentions_bot=True,
                   guild_id=guild if chat_type != "dm" else None, role_ids=roles)


def test_open_policy_allows_everyone() -> None:
    policy = AccessPolicy()
    assert policy.decide(_msg(), admin=False) is Verdict.ALLOW
    assert policy.decide(_msg("dm"), admin=False) is Verdict.ALLOW


def test_deny_lists_refuse_users_and_ignore_chats() -> None:
    policy = AccessPolicy(deny_users=frozenset({"discord:42"}), deny_chats=frozenset({"discord:3000"}))
    assert policy.decide(_msg(user="7", chat="3001"), admin=False) is Verdict.ALLOW
    assert policy.decide(_msg(chat="3001"), admin=False) is Verdict.REFUSE
    assert policy.decide(_msg("dm", chat="9"), admin=False) is Verdict.REFUSE
    assert policy.decide(_msg(user="7"), admin=False) is Verdict.IGNORE
    # A thread is ignored when its parent channel is, and can be named by its own id.
    assert policy.decide(_msg("thread", user="7", thread="3100"), admin=False) is Verdict.IGNORE
    by_thread = AccessPolicy(deny_chats=frozenset({"discord:3100"}))
    assert by_thread.decide(_msg("thread", thread="3100"), admin=False) is Verdict.IGNORE
    assert by_thread.decide(_msg(), admin=False) is Verdict.ALLOW


def test_allow_lists_guilds_and_roles() -> None:
    policy = AccessPolicy(allow_users=frozenset({"discord:42", "telegram:42"}), allow_role_ids=frozenset({"2100"}),
                          allow_guilds=frozenset({"2000"}), allow_chats=frozenset({"discord:3000", "telegram:-5"}))
    assert policy.decide(_msg(), admin=False) is Verdict.ALLOW
    assert policy.decide(_msg(user="7"), admin=False) is Verdict.REFUSE
    assert policy.decide(_msg(user="7", roles=("2100",)), admin=False) is Verdict.ALLOW
    assert policy.decide(_msg(guild="9999"), admin=False) is Verdict.IGNORE
    assert policy.decide(_msg(chat="3001"), admin=False) is Verdict.IGNORE
    # The guild list is Discord's; a Telegram group is judged by the chat lists only.
    assert policy.decide(_msg(platform="telegram", chat="-5", user="7", guild=None), admin=False) is Verdict.REFUSE
    assert policy.decide(_msg(platform="telegram", chat="-5", user="42", guild=None), admin=False) is Verdict.ALLOW


def test_admins_and_the_console_always_pass() -> None:
    policy = AccessPolicy(deny_users=frozenset({"discord:42"}), allow_chats=frozenset({"discord:1"}),
                          dm_policy="allowlist")
    assert policy.decide(_msg(), admin=True) is Verdict.ALLOW
    assert policy.decide(_msg("dm"), admin=True) is Verdict.ALLOW
    assert policy.decide(_msg("dm", platform="console"), admin=False) is Verdict.ALLOW


def test_dm_policies() -> None:
    listed = frozenset({"discord:42"})
    allowlist = AccessPolicy(allow_users=listed, dm_policy="allowlist")
    assert allowlist.decide(_msg("dm"), admin=False) is Verdict.ALLOW
    assert allowlist.decide(_msg("dm", user="7"), admin=False) is Verdict.REFUSE
    assert AccessPolicy(dm_policy="allowlist").decide(_msg("dm"), admin=False) is Verdict.REFUSE
    pairing = AccessPolicy(allow_users=listed, dm_policy="pairing")
    assert pairing.decide(_msg("dm"), admin=False) is Verdict.ALLOW
    assert pairing.decide(_msg("dm", user="7"), admin=False) is Verdict.PAIR
    assert pairing.decide(_msg("dm", user="7"), admin=False, approved=True) is Verdict.ALLOW
    # An approved DM sender is not thereby allowed in groups the allow list restricts.
    assert pairing.decide(_msg(user="7"), admin=False, approved=True) is Verdict.REFUSE


def test_free_response_chats() -> None:
    policy = AccessPolicy(free_response_chats=frozenset({"telegram:-5"}))
    assert policy.free_response(_msg(platform="telegram", chat="-5"))
    assert not policy.free_response(_msg(platform="telegram", chat="-6"))


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("allow_users", "42", "gateway.allow_users"),
    ("deny_chats", "irc:#x", "gateway.deny_chats"),
    ("dm_policy", "closed", "gateway.dm_policy"),
])
def test_access_settings_are_validated(key: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_settings(gateway={key: value})
    with pytest.raises(ConfigError, match=r"discord\.allow_guilds"):
        load_settings(discord={"allow_guilds": "my-server"})


def test_access_lists_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_GATEWAY__ALLOW_USERS", "discord:1, telegram:2")
    monkeypatch.setenv("CONCORD_DISCORD__ALLOW_ROLE_IDS", "2100,2200")
    settings = load_settings()
    assert settings.gateway.allow_users == ["discord:1", "telegram:2"]
    assert settings.discord.allow_role_ids == ["2100", "2200"]


async def test_pairing_codes_work_once_and_expire(tmp_path: object) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/p.db")
    try:
        pairing = Pairing(store.chat_settings, timedelta(minutes=10), lambda: now[0])
        code = await pairing.code_for("telegram:7")
        assert len(code) == 9 and code[4] == "-"
        assert await pairing.code_for("telegram:7") == code  # asked again: the same code
        assert not await pairing.is_approved("telegram:7")
        assert await pairing.approve("nope") is None
        assert await pairing.approve(code.lower().replace("-", " ")) == "telegram:7"
        assert await pairing.is_approved("telegram:7")
        assert await pairing.approve(code) is None  # used up
        late = await pairing.code_for("discord:8")
        now[0] += timedelta(minutes=11)
        assert await pairing.approve(late) is None
        assert not await pairing.is_approved("discord:8")
        assert await pairing.code_for("discord:8") != late  # an expired code is replaced
    finally:
        await store.aclose()


async def test_router_refuses_quietly_in_groups_and_once_in_dms(gateway_factory: GatewayFactory,
                                                               fake_llm: FakeLLMServer) -> None:
    _, adapter = await gateway_factory(gateway={"deny_users": ["discord:troll"], "deny_chats": ["discord:quiet"]})
    await adapter.say("hello", chat_type="group", chat_id="g1", user_id="troll", mentions_bot=True)
    await adapter.say("/status", chat_type="group", chat_id="g1", user_id="troll")
    await adapter.say("hello", chat_type="group", chat_id="quiet", user_id="u1", mentions_bot=True)
    await adapter.say("hello", chat_type="dm", chat_id="d1", user_id="troll")
    assert adapter.texts() == [REFUSED_DM]
    assert fake_llm.requests == []
    # The admin is never locked out, even in an ignored chat.
    await adapter.say("/status", chat_type="group", chat_id="quiet", user_id="boss")
    assert adapter.texts()[-1].startswith("Session ")


async def test_router_pairing_round_trip_survives_restart(gateway_factory: GatewayFactory,
                                                          fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: "welcome aboard"
    gateway, adapter = await gateway_factory(gateway={"dm_policy": "pairing"})
    await adapter.say("hi", chat_type="dm", chat_id="d7", user_id="u7")
    [pairing] = adapter.texts()
    code = pairing.split("code is ")[1].split(":")[0]
    assert pairing == PAIRING_TEXT.format(code=code)
    assert fake_llm.requests == []
    await adapter.say(f"/approve {code}", chat_type="dm", chat_id="d7", user_id="u7")  # not an admin: refused
    assert adapter.texts()[-1] == PAIRING_TEXT.format(code=code)
    await adapter.say(f"/approve {code}", chat_type="dm", chat_id="dboss", user_id="boss")
    assert adapter.texts()[-1] == "Approved discord:u7: they can use the bot now."
    await gateway.aclose()

    _, again = await gateway_factory(gateway={"dm_policy": "pairing"})
    await again.say("hi again", chat_type="dm", chat_id="d7", user_id="u7")
    assert again.texts() == ["welcome aboard"]
    await again.say(f"/approve {code}", chat_type="dm", chat_id="dboss", user_id="boss")
    assert "No pending pairing code" in again.texts()[-1]


async def test_free_response_chat_answers_without_a_mention(gateway_factory: GatewayFactory,
                                                            fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: "sure"
    _, adapter = await gateway_factory(gateway={"free_response_chats": ["discord:open"]})
    await adapter.say("anyone there?", chat_type="group", chat_id="open")
    await adapter.say("chatter", chat_type="group", chat_id="closed")
    assert adapter.texts() == ["sure"]


async def test_role_allow_list_through_the_router(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: "ok"
    _, adapter = await gateway_factory(discord={"allow_role_ids": ["2100"]})
    assert adapter._handler is not None
    plain = adapter.inbound("hi", chat_type="group", chat_id="g", user_id="u5", mentions_bot=True)
    await adapter._handler(dataclasses.replace(plain, guild_id="2000"))
    assert adapter.texts() == []
    member = adapter.inbound("hi", chat_type="group", chat_id="g", user_id="u5", mentions_bot=True)
    await adapter._handler(dataclasses.replace(member, guild_id="2000", role_ids=("2100",)))
    assert adapter.texts() == ["ok"]
