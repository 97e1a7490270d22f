"""The ``concord`` command line: run the gateway, inspect config, count tokens, compress transcripts, manage data."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gateway.cli.interrupts import EXIT_INTERRUPTED, StopRequested
from gateway.cli.store import add_store_commands
from gateway.config import ConfigError, Settings, load_settings, masked_dump
from gateway.ops.logsetup import configure_logging

# What a command needs is loaded when it runs: `concord health`, which Docker runs every 30 s, then loads the
# configuration only, not the compressor, the store and the platforms (two seconds of CPU each time).
if TYPE_CHECKING:
    from agent.llm.base import Provider

__all__ = ["build_parser", "main", "print_error"]

# Documented in README.md ("Exit codes"): 1 aborted or not found, 2 bad input or configuration, 3 storage.
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_UNHEALTHY = 1
EXIT_NOT_FOUND = 1
# What a shell reports for a command killed by SIGPIPE (`concord sessions export ID | head`).
EXIT_BROKEN_PIPE = 141


class CliParser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (exit 2), pointing at ``--help`` instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"concord: error: {message} (see {self.prog} --help)\n")


def print_error(message: str) -> None:
    """One error, on stderr, with the prefix every ``concord`` command uses (argparse's own errors included)."""
    print(f"concord: error: {message}", file=sys.stderr)


def _cmd_config_check(args: argparse.Namespace) -> int:
    settings = load_settings()
    print(json.dumps(masked_dump(settings), indent=2, default=str))
    if not settings.llm.configured:
        print("concord: note: no LLM configured (set CONCORD_LLM__BASE_URL and CONCORD_LLM__MODEL)",
              file=sys.stderr)
    return 0


def _cmd_tokens(args: argparse.Namespace) -> int:
    from agent.tokens import TokenCounter, estimate_messages_tokens_rough
    from agent.transcript import MalformedTranscript, read_transcript_file

    try:
        messages = read_transcript_file(Path(args.file), sys.stderr)
    except MalformedTranscript as exc:
        print_error(f"{args.file}: {exc}")
        return EXIT_USAGE
    except OSError as exc:
        print_error(f"cannot read {args.file}: {exc.strerror}")
        return EXIT_USAGE
    counter = TokenCounter(args.encoding)
    exact = counter.count_messages(messages)
    rough = estimate_messages_tokens_rough(messages)
    error = (rough - exact) / exact * 100 if exact else 0.0
    report = {"file": args.file, "messages": len(messages), "encoding": args.encoding, "exact_tokens": exact,
              "rough_tokens": rough, "rough_error_pct": round(error, 1)}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{args.file}: {len(messages)} messages, {exact:,} tokens ({args.encoding}); "
              f"rough estimate {rough:,} ({error:+.1f}%)")
    return 0


def _configure_logging(settings: Settings, *, log_file: Path | None = None) -> None:
    """Logs to stderr; with ``log_file`` (the interactive console) everything goes there and stderr only
    shows WARNING and up, so INFO lines never interrupt the chat."""
    configure_logging(settings.logging.level, json_logs=settings.logging.json_logs,
                      log_content=settings.logging.log_content, log_file=log_file)


def _console_log_file(settings: Settings) -> Path | None:
    """Where logs go while the interactive console is in use (None: no console, or not a terminal)."""
    from adapters.console import is_terminal
    from gateway.ops.data_dir import ensure_data_dir

    if settings.discord.token or settings.telegram.token or not is_terminal():
        return None
    return ensure_data_dir(settings.storage.data_dir) / "concord.log"


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.compression.feasibility import SummaryModelTooSmall
    from agent.compression.registry import EngineNotFound
    from gateway.app import run_gateway

    settings = load_settings()
    _configure_logging(settings, log_file=_console_log_file(settings))
    try:
        return asyncio.run(run_gateway(settings))
    except (EngineNotFound, SummaryModelTooSmall) as exc:
        print_error(str(exc))
        return EXIT_USAGE


def _cmd_sweep(args: argparse.Namespace) -> int:
    from gateway.app.maintenance import SweepSlotTaken, run_sweep
    from gateway.conversation.sweep import print_sweep_report

    settings = load_settings()
    _configure_logging(settings)
    if settings.redis.url is None and not args.dry_run:
        print("concord: note: no redis.url, so this sweep does not share locks with a running gateway. Nothing "
              "is lost if both compact a session at once (one version wins), but with one gateway process the "
              "built-in schedule (gateway.sweep_cron) is the better choice.", file=sys.stderr)
    try:
        report = asyncio.run(run_sweep(settings, dry_run=args.dry_run, show_progress=sys.stderr.isatty(),
                                       force=args.force))
    except SweepSlotTaken as exc:
        print(f"concord: {exc}; nothing to do (--force sweeps anyway)")
        return 0
    except RuntimeError as exc:
        print_error(str(exc))
        return EXIT_USAGE
    print_sweep_report(report)
    return 0


def _cmd_compress(args: argparse.Namespace) -> int:
    from agent.compression.cli import run_compress_command
    from gateway.app.providers import resolve_windows, summary_provider_for

    def summary_provider() -> Provider:
        settings = load_settings()
        if not settings.llm.configured and not settings.auxiliary.compression.base_url:
            raise ConfigError("--summary llm needs a model: set CONCORD_LLM__BASE_URL and CONCORD_LLM__MODEL "
                              "(or CONCORD_AUXILIARY__COMPRESSION__*), or use --summary static")
        return summary_provider_for(settings)

    async def summary_window() -> int:
        # Asked of the summary model's server, as the gateway does: a request larger than it serves would fail.
        return (await resolve_windows(load_settings()))[1].tokens

    return run_compress_command(args, provider_factory=summary_provider, summary_window=summary_window)


def _cmd_health(args: argparse.Namespace) -> int:
    from gateway.ops.heartbeat import heartbeat_age

    path = load_settings().gateway.heartbeat_file
    if path is None:
        print_error("gateway.heartbeat_file is not set, so there is nothing to check")
        return EXIT_USAGE
    age = heartbeat_age(path)
    if age is None or age > args.max_age:
        state = "missing" if age is None else f"{age:.0f} s old"
        print(f"concord: unhealthy: heartbeat {path} is {state} (limit {args.max_age:g} s)", file=sys.stderr)
        return EXIT_UNHEALTHY
    print(f"healthy: heartbeat {age:.0f} s old")
    return 0


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("must be between 0 and 86400 seconds")
    return value


RUN_DESCRIPTION = """Start the gateway: every platform with a token configured (Discord, Telegram), or, when none
is, a console chat in this terminal (Enter sends, Alt+Enter adds a line, Ctrl-C stops an answer or clears the
line and, at an empty prompt, quits; logs go to <data_dir>/concord.log meanwhile). Piped stdin is read one
message per line; a stdin that is empty from the start, with no platform configured, exits 2. SIGINT/SIGTERM
stop it cleanly: during start-up (waiting for the database, migrating, retrying a platform) at once, once
running after the turns in flight finish. Exit codes: 0 stopped, 1 a platform cannot be reached or its
connection cannot be recovered, 2 configuration, 3 storage (another `concord run` holds the SQLite database,
or the database cannot be opened)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every ``concord`` subcommand."""
    parser = CliParser(prog="concord", description=__doc__,
                       epilog="Exit codes: 0 ok, 1 aborted / not found / unhealthy, 2 bad input or configuration, "
                              "3 storage unavailable, 130 interrupted (Ctrl-C), 141 output pipe closed.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do")

    config = sub.add_parser("config", help="inspect the configuration", description="Inspect the configuration.")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION",
                                       help="what to do with it")
    config_sub.add_parser("check", help="validate and print the effective config (secrets masked)",
                          description="Validate the configuration (config.yaml, .env, CONCORD_* variables) and "
                                      "print it with secrets masked; exit 2 naming every bad key.").set_defaults(
        func=_cmd_config_check)

    tokens = sub.add_parser("tokens", help="count the tokens of an OpenAI-format JSONL transcript",
                            description="Count the tokens of an OpenAI-format JSONL transcript, exactly (tiktoken, "
                                        "offline) and with the rough chars/4 estimate. Exit 2 on bad input.")
    tokens.add_argument("file", help="the JSONL transcript, one chat message per line")
    tokens.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"],
                        help="tokenizer (default o200k_base)")
    tokens.add_argument("--json", action="store_true", help="print one JSON object")
    tokens.set_defaults(func=_cmd_tokens)

    from agent.compression.cli import build_parser as compress_parser

    compress = compress_parser()
    sub.add_parser("compress", parents=[compress], add_help=False, description=compress.description,
                   help="compress a JSONL transcript once, as /compress would").set_defaults(func=_cmd_compress)
    sub.add_parser("run", help="start the gateway (console chat when no platform token is set)",
                   description=RUN_DESCRIPTION).set_defaults(func=_cmd_run)
    sweep = sub.add_parser("sweep", help="run one hygiene sweep over all active sessions (for system cron)",
                           description="Run one hygiene sweep over all active sessions and print what it did "
                                       "(for system cron; set gateway.sweep_cron=off then). With Redis and "
                                       "gateway.sweep_cron set, a run of that schedule a worker already swept "
                                       "is skipped; with Redis nothing is done while another process sweeps.")
    sweep.add_argument("--dry-run", action="store_true", help="only list the sessions that would be compressed")
    sweep.add_argument("--force", action="store_true",
                       help="sweep even when this run of gateway.sweep_cron was already swept by a worker (with Redis)")
    sweep.set_defaults(func=_cmd_sweep)
    health = sub.add_parser("health", help="exit 0 while a running gateway's heartbeat is fresh (Docker HEALTHCHECK)",
                            description="Check gateway.heartbeat_file, which a running gateway touches every "
                                        "10 s: exit 0 when fresh, 1 when stale or missing, 2 when not configured.")
    health.add_argument("--max-age", type=_positive_seconds, default=60.0, metavar="SECONDS",
                        help="oldest heartbeat still healthy (default 60)")
    health.set_defaults(func=_cmd_health)
    add_store_commands(sub)
    return parser


def _run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print_error(str(exc))
        return EXIT_USAGE
    except Exception as exc:
        status = _storage_failure(exc)
        if status is None:
            raise
        return status


def _storage_failure(exc: Exception) -> int | None:
    """Say what a failure of the store was and give its exit status; None for any other failure. (Loaded here,
    as only a command that opened the store can fail so.)"""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store import CompactionNotFound, SessionNotFound, StorageUnavailable
    from gateway.store.migrate import first_line

    if isinstance(exc, SessionNotFound | CompactionNotFound):
        print_error(f"not found: {exc}")
        return EXIT_NOT_FOUND
    if isinstance(exc, StorageUnavailable):
        print_error(str(exc))
        return EXIT_UNAVAILABLE
    if isinstance(exc, SQLAlchemyError):  # a query failed on a damaged database (a table dropped by hand, corrupt pages)
        print_error(f"database query failed: {first_line(exc)}")
        return EXIT_UNAVAILABLE
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``concord`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return _run_command(args)
    except StopRequested:
        return 0  # `concord run` asked to stop before the gateway's own signal handlers were in place
    except KeyboardInterrupt:
        print("concord: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing, and keep the interpreter's final flush from complaining.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
