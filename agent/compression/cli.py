"""``concord compress INPUT.jsonl``: compress one OpenAI-format JSONL transcript once, as a manual /compress would.

Exit codes: 0 compressed or nothing to compress (a normal outcome, with its reason); 1 the compression was
aborted (summary model unavailable), or its result still does not fit ``--context-length`` with room for an
answer (a warning says by how much); 2 bad usage or malformed input (the message names the line).
Without ``-o`` the transcript goes to stdout and the report to stderr; with ``-o`` the report goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agent.compression.threshold import output_reserve
from agent.transcript import MalformedTranscript, read_transcript, read_transcript_file

if TYPE_CHECKING:  # every `concord` command builds this parser: the compressor loads when a compression runs
    from agent.compression.engine import CompressionResult
    from agent.llm.base import Provider

__all__ = ["build_parser", "main", "run_compress_command"]

DEFAULT_CONTEXT_LENGTH = 200_000

ProviderFactory = Callable[[], "Provider"]
# The summary model's window as its server serves it (None: unknown, taken to be --context-length).
WindowFactory = Callable[[], Awaitable[int | None]]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``concord compress``."""
    parser = argparse.ArgumentParser(prog="concord compress", description="Compress a JSONL chat transcript once.")
    parser.add_argument("input", help="OpenAI-format JSONL transcript, one message per line ('-' for stdin)")
    parser.add_argument("-o", "--output", help="where to write the compressed JSONL ('-' or omitted: stdout)")
    parser.add_argument("--context-length", type=int, default=DEFAULT_CONTEXT_LENGTH,
                        help=f"main model window in tokens (default {DEFAULT_CONTEXT_LENGTH:,})")
    parser.add_argument("--threshold", type=float, default=0.50, help="trigger fraction of the window (default 0.50)")
    parser.add_argument("--focus", help="focus topic: kept at full detail in the summary")
    parser.add_argument("--summary", choices=("llm", "static"), default="llm",
                        help="llm: the configured summary model; static: deterministic summary, no LLM")
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return parser


def _human_report(result: CompressionResult) -> str:
    if not result.compressed:
        head = "Aborted" if result.aborted else "Nothing compressed"
        return (f"{head}: {result.reason}\n"
                f"{result.messages_before:,} messages, {result.tokens_before:,} tokens unchanged")
    lines = [
        f"Compressed {result.messages_before:,} → {result.messages_after:,} messages, "
        f"{result.tokens_before:,} → {result.tokens_after:,} tokens ({result.savings_pct:.1%} saved)",
        f"head kept: {f'messages 0–{result.head_end - 1}' if result.head_end else 'none'}; "
        f"tail kept from message {result.tail_start}; "
        f"pruned {result.pruned} old tool messages; summary: {result.summary_kind}",
    ]
    if result.reason:
        lines.append(f"note: {result.reason}")
    return "\n".join(lines)


async def _compress(messages: list[dict[str, Any]], opts: argparse.Namespace,
                    provider: Provider | None, summary_window: WindowFactory | None) -> CompressionResult:
    from agent.compression.compressor import ContextCompressor

    try:
        window = await summary_window() if provider is not None and summary_window is not None else None
        compressor = ContextCompressor(context_length=opts.context_length, threshold=opts.threshold,
                                       summary_provider=provider, main_provider=None, summary_context_length=window)
        return await compressor.compress(messages, focus_topic=opts.focus, force=True)
    finally:
        if provider is not None:
            await provider.aclose()


def _write(messages: Sequence[dict[str, Any]], out: IO[str]) -> None:
    for message in messages:
        out.write(json.dumps(message, ensure_ascii=False) + "\n")


def run_compress_command(
    args: argparse.Namespace | Sequence[str],
    *,
    provider_factory: ProviderFactory | None = None,
    summary_window: WindowFactory | None = None,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run ``concord compress``; ``provider_factory`` builds the configured summary model for ``--summary llm``
    and ``summary_window`` finds the window its server serves it with (every summary request fits it)."""
    from agent.compression.feasibility import SummaryModelTooSmall

    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    opts = args if isinstance(args, argparse.Namespace) else build_parser().parse_args(list(args))
    if opts.context_length <= 0 or not 0 < opts.threshold <= 1:
        stderr.write("concord: error: --context-length must be positive and --threshold in (0, 1]\n")
        return 2
    to_file = opts.output not in (None, "-")
    if to_file and Path(opts.output).is_dir():
        stderr.write(f"concord: error: {opts.output} is a directory (-o names the output file)\n")
        return 2
    if to_file and Path(opts.output).exists() and not opts.force:
        stderr.write(f"concord: error: {opts.output} exists (use --force to overwrite)\n")
        return 2
    if opts.summary == "llm" and provider_factory is None:
        stderr.write("concord: error: --summary llm needs a configured summary model (or use --summary static)\n")
        return 2
    try:
        if opts.input == "-":
            messages = read_transcript(getattr(stdin, "buffer", stdin))
        else:
            messages = read_transcript_file(Path(opts.input), stderr)
    except MalformedTranscript as error:
        stderr.write(f"concord: error: {opts.input}: {error}\n")
        return 2
    except OSError as error:
        stderr.write(f"concord: error: cannot read {opts.input}: {error.strerror}\n")
        return 2
    provider = provider_factory() if opts.summary == "llm" and provider_factory is not None else None
    try:
        result = asyncio.run(_compress(messages, opts, provider, summary_window))
    except SummaryModelTooSmall as error:
        stderr.write(f"concord: error: {error}\n")
        return 2
    if opts.summary == "static" and result.summary_kind == "static":
        # What was asked for; the compressor's reason (no summary provider configured) would read as a failure.
        result = replace(result, reason="")
    report_stream = stdout if to_file else stderr
    if to_file:
        try:
            with Path(opts.output).open("w", encoding="utf-8") as out:
                _write(result.messages, out)
        except OSError as error:
            stderr.write(f"concord: error: cannot write {opts.output}: {error.strerror}\n")
            return 2
    else:
        _write(result.messages, stdout)
    report = json.dumps(result.stats(), ensure_ascii=False) if opts.json else _human_report(result)
    report_stream.write(report + "\n")
    room = opts.context_length - (output_reserve(None, opts.context_length) or 0)
    if result.tokens_after > room:
        stderr.write(f"concord: warning: the result still does not fit: {result.tokens_after:,} tokens, but a "
                     f"{opts.context_length:,}-token window leaves {room:,} beside the answer\n")
        return 1
    return 1 if result.aborted else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python -m agent.compression.cli INPUT.jsonl …`` (only ``--summary static`` here)."""
    return run_compress_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
