"""What the Telegram adapter is configured with: `TelegramSettings`, one frozen record the config layer maps
Concord's ``telegram.*`` settings onto (the adapter's modes are described in `adapters.telegram_adapter`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from adapters.supervise import Backoff

__all__ = ["TelegramSettings"]


@dataclass(frozen=True)
class TelegramSettings:
    """Everything the Telegram adapter needs; the config layer maps its settings onto this."""

    token: str = field(repr=False)
    api_base_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    webhook_path: str = "telegram"
    webhook_secret: str | None = field(default=None, repr=False)
    check_chat_admins: bool = False
    admin_cache_seconds: float = 60.0
    allow_bots: bool = False
    poll_timeout: int = 30
    typing_interval: float = 4.0
    max_retry_attempts: int = 5
    max_retry_wait: float = 60.0
    max_inbound_chars: int = 16_000
    max_attachment_bytes: int = 10_000_000
    drain_seconds: float = 30.0
    parse_mode: Literal["html", "plain"] = "html"
    # False: `start` connects without polling; the gateway calls `start_polling` when this worker holds the
    # polling lease (several workers, one poller).
    poll_on_start: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    # Polling that fetched nothing (not even an empty answer) for this long is restarted.
    stall_seconds: float = 150.0
    watch_interval: float = 5.0
    # How often webhook mode asks Telegram whether the bot's webhook is still ours (getWebhookInfo).
    webhook_check_seconds: float = 60.0
    # Show answers as they grow by editing one message, at most once per ``edit_interval`` s per chat.
    streaming: bool = True
    edit_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.mode == "webhook" and not (self.webhook_url and self.webhook_secret):
            raise ValueError("telegram webhook mode needs webhook_url and webhook_secret")

