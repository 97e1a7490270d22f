"""Session keys: one per DM, per group channel, per thread; shared vs per-user scope."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.intake.keys import SessionKey, session_key


@dataclass
class Msg:
    platform: str = "discord"
    chat_id: str = "c1"
    chat_type: str = "group"
    thread_id: str | None = None
    user_id: str = "u1"


def test_dm_is_one_session_per_chat_whatever_the_scope() -> None:
    for scope in ("shared", "per-user"):
        assert session_key(Msg(chat_type="dm", chat_id="d9"), scope) == SessionKey("discord", "dm:d9")


def test_group_shared_scope_puts_everyone_in_one_session() -> None:
    assert session_key(Msg(user_id="a")) == session_key(Msg(user_id="b")) == SessionKey("discord", "group:c1")


def test_group_per_user_scope_separates_speakers() -> None:
    a, b = session_key(Msg(user_id="a"), "per-user"), session_key(Msg(user_id="b"), "per-user")
    assert a != b
    assert a.chat_key == "group:c1:user:a"


@pytest.mark.parametrize("chat_type", ["group", "channel", "thread"])
def test_threads_are_separate_from_their_parent_channel(chat_type: str) -> None:
    parent = session_key(Msg(chat_type="group"))
    thread = session_key(Msg(chat_type=chat_type, thread_id="t7"))
    other = session_key(Msg(chat_type=chat_type, thread_id="t8"))
    assert len({parent, thread, other}) == 3
    assert str(thread) == "discord:thread:c1:t7"


def test_platforms_never_collide() -> None:
    assert session_key(Msg(platform="telegram")) != session_key(Msg(platform="discord"))


def test_is_group() -> None:
    assert not session_key(Msg(chat_type="dm")).is_group
    assert session_key(Msg()).is_group


def test_the_chat_id_comes_back_from_every_kind_of_key() -> None:
    """What budgets charge a sweep's summary to: the chat the message came from (a thread's parent channel)."""
    messages = [Msg(chat_type="dm", chat_id="-1001"), Msg(chat_id="-1001"), Msg(chat_id="-1001", thread_id="t7")]
    for message in messages:
        for scope in ("shared", "per-user"):
            assert session_key(message, scope).chat_id == "-1001"  # type: ignore[arg-type]
