"""The ``concord`` command line: run the gateway, inspect config, count tokens, compress transcripts, manage data."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.compression.engine import EngineNotFound
from agent.compression.feasibility import SummaryModelTooSmall
from agent.llm.base import Provider
from agent.transcript import MalformedTranscript, read_transcript_file
from gateway.cli_store import add_store_commands
from gateway.config import ConfigError, Settings, load_settings, masked_dump
from gateway.logsetup import configure_logging
from gateway.store import StorageUnavailable

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


def _cmd_config_check(args: argparse.Namespace) -> int:
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"concord: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(masked_dump(settings), indent=2, default=str))
    if not settings.llm.configured:
        print("note: no LLM configured (set CONCORD_LLM__BASE_URL and CONCORD_LLM__MODEL)", file=sys.stderr)
    return 0


def _cmd_tokens(args: argparse.Namespace) -> int:
    from agent.tokens import TokenCounter, estimate_messages_tokens_rough

    try:
        messages = read_transcript_file(Path(args.file), sys.stderr)
    except MalformedTranscript as exc:
        print(f"concord: {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"concord: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
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


def _configure_logging(settings: Settings) -> None:
    configure_logging(settings.logging.level, json_logs=settings.logging.json_logs,
                      log_content=settings.logging.log_content)


def _cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import run_gateway

    settings = load_settings()
    _configure_logging(settings)
    try:
        return asyncio.run(run_gateway(settings))
    except (EngineNotFound, SummaryModelTooSmall) as exc:
        print(f"concord: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_sweep(args: argparse.Namespace) -> int:
    from gateway.app import print_sweep_report, run_sweep

    settings = load_settings()
    _configure_logging(settings)
    if settings.redis.url is None and not args.dry_run:
        print("concord: note: no redis.url, so this sweep does not share locks with a running gateway. Nothing "
              "is lost if both compact a session at once (one version wins), but with one gateway process the "
              "built-in schedule (gateway.sweep_cron) is the better choice.", file=sys.stderr)
    try:
        report = asyncio.run(run_sweep(settings, dry_run=args.dry_run, show_progress=sys.stderr.isatty()))
    except RuntimeError as exc:
        print(f"concord: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print_sweep_report(report)
    return 0


def _cmd_compress(args: argparse.Namespace) -> int:
    from agent.compression.cli import run_compress_command
    from gateway.app import summary_provider_for

    def summary_provider() -> Provider:
        settings = load_settings()
        if not settings.llm.configured and not settings.auxiliary.compression.base_url:
            raise ConfigError("--summary llm needs a model: set CONCORD_LLM__BASE_URL and CONCORD_LLM__MODEL "
                              "(or CONCORD_AUXILIARY__COMPRESSION__*), or use --summary static")
        return summary_provider_for(settings)

    return run_compress_command(args, provider_factory=summary_provider)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every ``concord`` subcommand."""
    parser = argparse.ArgumentParser(prog="concord", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    config = sub.add_parser("config", help="inspect the configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    config_sub.add_parser("check", help="validate and print the effective config (secrets masked)").set_defaults(
        func=_cmd_config_check)

    tokens = sub.add_parser("tokens", help="count the tokens of an OpenAI-format JSONL transcript")
    tokens.add_argument("file")
    tokens.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"])
    tokens.add_argument("--json", action="store_true", help="print one JSON object")
    tokens.set_defaults(func=_cmd_tokens)

    from agent.compression.cli import build_parser as compress_parser

    sub.add_parser("compress", parents=[compress_parser()], add_help=False,
                   help="compress a JSONL transcript once, as /compress would").set_defaults(func=_cmd_compress)
    sub.add_parser("run", help="start the gateway (console chat when no platform token is set)").set_defaults(
        func=_cmd_run)
    sweep = sub.add_parser("sweep", help="run one hygiene sweep over all active sessions (for system cron)")
    sweep.add_argument("--dry-run", action="store_true", help="only list the sessions that would be compressed")
    sweep.set_defaults(func=_cmd_sweep)
    add_store_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``concord`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"concord: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StorageUnavailable as exc:
        print(f"concord: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
