"""How messages are handled, in the settings: the ``gateway`` section (sessions, groups, access, persona,
busy modes), the ``inbox`` that keeps what a platform cannot deliver again, the ``delivery`` ledger of answers,
and the ``limits`` on how fast a user or chat may spend the model."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from gateway.config.fields import SECTION, CsvList, split_csv

_PLATFORMS = ("discord", "telegram", "console")


def _platform_ids(entries: list[str], what: str, kind: str) -> list[str]:
    """Check the ``platform:id`` form shared by admins and the access lists."""
    for entry in entries:
        platform, _, ident = entry.partition(":")
        if platform not in _PLATFORMS or not ident:
            raise ValueError(f"{what} {entry!r} must look like discord:<{kind} id>, telegram:<{kind} id> "
                             "or console:<name>")
    return entries


PERSONA_FIELDS = frozenset({"bot_name", "platform"})


def read_persona(value: str) -> str:
    """``value`` itself, or the text of the file ``@path`` names."""
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the persona file {path} ({type(exc).__name__})") from None


def check_persona_template(text: str) -> str:
    """Raise ValueError unless ``text`` uses only the {bot_name} / {platform} placeholders."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise ValueError(f"persona text has a stray brace ({exc}); write {{{{ and }}}} for literal braces") from None
    unknown = fields - PERSONA_FIELDS
    if unknown:
        raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}}: only {{bot_name}} and {{platform}} are "
                         "filled in (write {{ and }} for literal braces)")
    return text


class GatewaySettings(BaseModel):
    """Session handling in front of the agent (R-G2…R-G6)."""

    model_config = SECTION
    hygiene_threshold: float = Field(default=0.85, gt=0, le=1)
    hygiene_hard_message_limit: int = Field(default=5000, ge=10, le=10_000_000)
    # Up to a year: longer is "never", which is the empty value.
    idle_expiry_minutes: int | None = Field(default=None, gt=0, le=525_600)
    sweep_cron: str | None = "*/30 * * * *"
    admins: CsvList = []
    session_scope: Literal["shared", "per-user"] = "shared"
    # Per-platform overrides, e.g. {"telegram": "per-user"}; platforms not listed use session_scope.
    session_scope_by_platform: dict[Literal["discord", "telegram", "console"], Literal["shared", "per-user"]] = {}
    # observe: every visible group line is stored in its session (batched); addressed: unaddressed lines are
    # only kept in memory (group_context_limit of them) and handed to the next question.
    group_history: Literal["addressed", "observe"] = "observe"
    group_context_limit: int = Field(default=50, ge=0, le=10_000)
    # While the database is down, messages of a session wait in memory, in order, up to this many; the next
    # ones are answered "unavailable".
    held_messages_per_session: int = Field(default=500, ge=1, le=100_000)
    bot_name: str = "Concord"
    # Names this worker in the delivery ledger and logs; unset: <hostname>:<pid>.
    worker_id: str | None = Field(default=None, min_length=1, max_length=128)
    # How long a handled inbound id (Telegram update, Discord message) is remembered to drop redeliveries.
    dedupe_ttl_seconds: float = Field(default=172_800.0, gt=0)
    # Longest reply sent to a chat; a longer answer is cut with a note (the whole answer stays stored).
    max_reply_chars: int = Field(default=20_000, ge=500, le=1_000_000)
    # The persona: text, or @path to a file holding it; {bot_name} and {platform} are filled in. Unset: the
    # built-in one. Admins can override it per chat with /persona.
    system_prompt: str | None = None
    # Pinned rules per chat (/pin): at most this many, and this many tokens of them in all.
    pins_max_count: int = Field(default=20, ge=0, le=500)
    pins_max_tokens: int = Field(default=2_000, ge=0, le=100_000)
    # Touched every few seconds while the gateway runs; `concord health` (Docker HEALTHCHECK) reads its age.
    heartbeat_file: Path | None = None

    # Access control (`gateway.policy.access`): ``platform:id`` entries like ``admins``; an empty allow list allows all.
    allow_users: CsvList = []
    deny_users: CsvList = []
    allow_chats: CsvList = []
    # Ignored chats: nothing from them is answered or kept.
    deny_chats: CsvList = []
    # Group chats where every message is addressed to the bot (no mention needed).
    free_response_chats: CsvList = []
    dm_policy: Literal["open", "allowlist", "pairing"] = "open"
    pairing_code_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
    # A message arriving while its session's turn runs: queue (answered after), interrupt (the sender's new
    # message cancels their running turn), collect (a sender's messages within the window become one turn).
    busy_mode: Literal["queue", "interrupt", "collect"] = "queue"
    collect_window_seconds: float = Field(default=2.0, gt=0, le=60)

    _split_lists = field_validator("admins", "allow_users", "deny_users", "allow_chats", "deny_chats",
                                   "free_response_chats", mode="before")(split_csv)

    @field_validator("admins", "allow_users", "deny_users", "allow_chats", "deny_chats", "free_response_chats")
    @classmethod
    def _platform_id_format(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        what = {"admins": "admin", "allow_users": "user", "deny_users": "user"}.get(info.field_name or "", "chat")
        return _platform_ids(entries, what, "chat" if what == "chat" else "user")

    @field_validator("system_prompt")
    @classmethod
    def _persona_template(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        check_persona_template(read_persona(value))
        return value

    def persona_template(self) -> str | None:
        """The configured persona text (read from the file for ``@path``), or None for the built-in one."""
        return read_persona(self.system_prompt) if self.system_prompt else None

    def scope_for(self, platform: str) -> Literal["shared", "per-user"]:
        """The session scope of group chats on ``platform``."""
        return self.session_scope_by_platform.get(platform, self.session_scope)  # type: ignore[call-overload]

    @field_validator("sweep_cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value in (None, "", "off"):
            return None
        from gateway.config.cron import cron_trigger

        try:
            cron_trigger(value)
        except ValueError as exc:
            raise ValueError(f"not a crontab expression of 5 fields, or 6 with seconds first ({exc})") from None
        return value


class DeliverySettings(BaseModel):
    """The delivery ledger: answers are stored before they are sent and sent again, once, after a crash."""

    model_config = SECTION
    # An answer still unconfirmed this long after it was stored is presumed lost with its worker: resent once.
    resend_after_seconds: float = Field(default=120.0, gt=0)
    # Unconfirmed answers older than this are not sent any more (marked expired).
    freshness_seconds: float = Field(default=3600.0, gt=0)
    # Answers no longer pending (sent, failed, expired) are deleted from the ledger this long after they were
    # stored; the history keeps every answer.
    keep_seconds: float = Field(default=7 * 86400.0, gt=0)

    @model_validator(mode="after")
    def _window(self) -> DeliverySettings:
        if self.freshness_seconds <= self.resend_after_seconds:
            raise ValueError("delivery.freshness_seconds must be longer than delivery.resend_after_seconds")
        if self.keep_seconds <= self.freshness_seconds:
            raise ValueError("delivery.keep_seconds must be longer than delivery.freshness_seconds")
        return self


class InboxSettings(BaseModel):
    """The inbox: messages a platform cannot deliver again (Discord, polled Telegram) kept until handled."""

    model_config = SECTION
    # A kept message its worker stopped vouching for this long ago is presumed lost with that worker: another
    # worker handles it (its worker renews the claim every third of this while it lives).
    stale_after_seconds: float = Field(default=30.0, ge=1)



class LimitsSettings(BaseModel):
    """How fast one user or chat may spend the model (`gateway.policy.limits`); unset or 0 means no limit.

    Kept in Redis when ``redis.url`` is set (shared by every worker), in-process otherwise. Admins are exempt.
    """

    model_config = SECTION
    user_messages_per_minute: int | None = Field(default=None, ge=0, le=100_000)
    chat_messages_per_minute: int | None = Field(default=None, ge=0, le=100_000)
    # Prompt + completion tokens as the provider reports them, per UTC day.
    user_tokens_per_day: int | None = Field(default=None, ge=0, le=10**12)
    chat_tokens_per_day: int | None = Field(default=None, ge=0, le=10**12)
    # Messages of one session waiting behind the running one (admins and the console exempt); more get a notice.
    session_queue_depth: int = Field(default=20, ge=1, le=1000)
