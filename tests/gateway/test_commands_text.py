"""Command parsing, admin check and the texts users see."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.base import Inbound
from agent.compression.engine import CompressionResult
from gateway.conversation.command_rules import Command, is_admin
from gateway.conversation.commands import format_help
from gateway.conversation.session_commands import NOTHING_TO_COMPRESS, format_compress_result
from gateway.conversation.status_commands import StatusFigures, format_status


def _inbound(**kw: object) -> Inbound:
    base = dict(platform="telegram", chat_id="c", chat_type="dm", thread_id=None, user_id="u", user_name="U",
                message_id="1", text="")
    base.update(kw)
    return Inbound(**base)  # type: ignore[arg-type]


def test_command_of_inbound() -> None:
    assert Command.of(_inbound(text="hi")) is None
    assert Command.of(_inbound(is_command=True, command="Compress", command_args=" db migration ")) == Command(
        "compress", "db migration")
    assert not Command("frobnicate").known and Command("status").known


def test_admin_rules() -> None:
    assert Command("compress").needs_admin(in_group=False)
    assert not Command("new").needs_admin(in_group=False)
    assert Command("new").needs_admin(in_group=True)
    assert not Command("status").needs_admin(in_group=True)
    assert is_admin("discord", "42", ["discord:42"])
    assert not is_admin("telegram", "42", ["discord:42"])
    assert is_admin("telegram", "42", [], hint=True)


def _result(**kw: object) -> CompressionResult:
    base = dict(messages=[], compressed=True, messages_before=120, messages_after=24,
                tokens_before=48_200, tokens_after=9_100)
    base.update(kw)
    return CompressionResult(**base)  # type: ignore[arg-type]


def test_compress_result_line_shows_before_after_and_savings() -> None:
    assert format_compress_result(_result()) == (
        "Compressed: 120 → 24 messages, 48,200 → 9,100 tokens (81% saved).")


def test_compress_result_other_outcomes() -> None:
    assert format_compress_result(_result(compressed=False)) == NOTHING_TO_COMPRESS
    assert "ineffective" in format_compress_result(_result(compressed=False, reason="ineffective"))
    aborted = format_compress_result(_result(compressed=False, aborted=True, reason="auth failure"))
    assert aborted.startswith("⚠️") and "unchanged" in aborted


def test_status_lists_every_figure() -> None:
    figures = StatusFigures(
        session_id="s1", tokens=50_000, token_source="usage", context_length=200_000, threshold_tokens=100_000,
        hygiene_tokens=170_000, hygiene_message_limit=5000, messages=321, compression_count=2, engine="compressor",
        model="m-1", last_compaction_at=datetime(2025, 1, 2, 3, 4, tzinfo=UTC),
        last_compaction_reason="manual", last_compaction_savings=0.8,
    )
    text = format_status(figures)
    for fragment in ("50,000 / 200,000 tokens (25%", "100,000 tokens (50%)", "170,000 tokens (85%)",
                     "> 5,000 messages", "Compressions: 2", "2025-01-02 03:04 UTC (manual, saved 80%)",
                     "Engine: compressor", "Model: m-1", "Messages: 321"):
        assert fragment in text
    never = format_status(StatusFigures("s", 0, "count", 0, 0, 0, 10, 0, 0, "e", ""))
    assert "Last compaction: never" in never and "n/a" in never


def test_help_marks_admin_commands_for_non_admins() -> None:
    assert "(admins only)" in format_help(admin=False)
    assert "(admins only)" not in format_help(admin=True)


def test_help_lists_quit_only_in_the_console() -> None:
    assert "/quit" in format_help(admin=True, console=True)
    assert "/quit" not in format_help(admin=True)
