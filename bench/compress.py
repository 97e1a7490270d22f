"""Compression speed on the path users run — the LLM summary — and on the static one, side by side with
another revision.

    python -m bench.compress                      # this checkout alone
    python -m bench.compress --baseline 521b127   # the same cases against that revision, interleaved
    python -m bench.compress --quick              # no 100K-message session, 3 rounds

Cases: every corpus of the corpus folder (``bench.corpus``; each transcript compressed with the window set to its own
size, as the corpus tests do), the 28 coding-agent transcripts together, the largest one alone, and synthetic
sessions of 1K / 5K / 20K / 100K messages (tau-bench conversations chained, 200K window). Each runs on two
paths — ``llm``: an instant in-process summary model with a fixed ~6,000-character reply, so serializing,
redacting and counting the middle, building the prompt and the budget checks all run; ``static``: no
summary model, the deterministic fallback — and in two modes:

* warm: the token counter has seen every message (the agent counted them; a library user's case);
* cold: a gateway compressing a session after a restart: the counter has seen none, and the caller hands over
  what the store keeps per row, where the revision accepts it — the counts and the prepared records
  (``accepts_token_counts``, ``accepts_prepared``; both made once per case, untimed).

``--baseline GITREF`` checks the revision out in a temporary git worktree and runs it in a second worker
process; every measurement alternates the two (A, B, A, B…), one warm-up round is dropped, and the median
of ``--rounds`` (≥ 7) is kept. Old/new ratios are the figures to read on a noisy machine. Each worker also
reports a digest of every compression's output (messages, token figures, summary prompt), and the table
says whether both revisions produced the same.

Warm and cold also cover what a revision keeps per message (evidence facts, summary blocks): warm, the
worker has handed the messages to the engine as the gateway does when it stores them (untimed); cold, it has
none of it in memory, only the records ``on_messages_stored`` returned (where the revision makes them), which
the compression adopts inside its timed call. The stage profile at the end gives each stage's share of the LLM path's time (summed over the
timed rounds; timers wrap what runs each stage — the compressor's stage methods, or the functions the split
compressor calls — each stage's own time), for both revisions.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.tokens import get_counter
from bench.corpus import Transcript, load_all

__all__ = ["Worker", "build_cases", "main", "synthetic_session"]

Messages = list[dict[str, Any]]
Case = list[tuple[Messages, int]]

REPO_ROOT = Path(__file__).resolve().parent.parent
_WORKER = Path(__file__).resolve().parent / "_compress_worker.py"
# The coding-agent transcripts (6 + 22) of the side-by-side measurement; tau-bench's short airline
# dialogues are a corpus row of their own and the material of the synthetic sessions.
AGENT_CORPORA = ("claude_code", "miniswe")
SIZES = (1_000, 5_000, 20_000, 100_000)
SYNTHETIC_WINDOW = 200_000
PATHS = ("llm", "static")
MODES = ("warm", "cold")
# Issue 15's targets: old/new time on the LLM path, warm.
# Issue 28's targets: old/new time on the LLM path, warm and cold, against 521b127.
TARGETS = {"warm": {"agents (28)": 3.0, "largest": 4.0, "synthetic 20,000": 4.0},
           "cold": {"agents (28)": 3.0, "largest": 3.0, "synthetic 20,000": 3.0}}
COLD_OVER_WARM_TARGET = 1.2
# The cases whose stage profile is printed, and the ledger's largest share of a warm compaction.
PROFILED = ("agents (28)", "largest", "synthetic 20,000")
LEDGER_SHARE_TARGET = 0.15


def synthetic_session(trajectories: Sequence[Transcript], size: int) -> Messages:
    """``size`` messages: one system prompt, then tau-bench conversations chained with unique call ids."""
    messages: Messages = [trajectories[0].messages[0]]
    round_ = 0
    while len(messages) < size:
        for transcript in trajectories:
            tag = f"r{round_}_{transcript.name}_"
            for message in transcript.messages[1:]:
                copy = dict(message)
                if copy.get("tool_call_id"):
                    copy["tool_call_id"] = tag + str(copy["tool_call_id"])
                if copy.get("tool_calls"):
                    copy["tool_calls"] = [{**c, "id": tag + str(c["id"])} for c in copy["tool_calls"]]
                messages.append(copy)
            if len(messages) >= size:
                break
        round_ += 1
    # End on a complete turn: a user ask, so the live request is well defined.
    return [*messages[:size], {"role": "user", "content": "Thanks — one more question about my booking."}]


def build_cases(transcripts: Sequence[Transcript], sizes: Sequence[int]) -> dict[str, Case]:
    """Case name → the (messages, window) compressions it times, in order."""
    counter = get_counter()

    def own_window(transcript: Transcript) -> tuple[Messages, int]:
        return transcript.messages, max(counter.count_messages(transcript.messages), 4_000)

    cases: dict[str, Case] = {}
    for corpus in sorted({t.corpus for t in transcripts}):
        items = [t for t in transcripts if t.corpus == corpus]
        cases[f"{corpus} ({len(items)})"] = [own_window(t) for t in items]
    agents = [t for t in transcripts if t.corpus in AGENT_CORPORA]
    if agents:
        cases[f"agents ({len(agents)})"] = [own_window(t) for t in agents]
        largest = max(agents, key=lambda t: counter.count_messages(t.messages))
        cases["largest"] = [own_window(largest)]
    tau = [t for t in transcripts if t.corpus == "tau_bench"]
    for size in sizes if tau else ():
        cases[f"synthetic {size:,}"] = [(synthetic_session(tau, size), SYNTHETIC_WINDOW)]
    return cases


class Worker:
    """A `_compress_worker` process running the ``agent`` package of the checkout at ``root``."""

    def __init__(self, root: Path, cases_file: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.process = subprocess.Popen([sys.executable, str(_WORKER), str(root), str(cases_file)], cwd=root,
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._read()
        if not str(hello.get("agent", "")).startswith(str(root)):
            raise RuntimeError(f"worker for {root} imported agent from {hello.get('agent')}")
        self.takes_counts = bool(hello["takes_counts"])
        self.takes_prepared = bool(hello.get("takes_prepared"))

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker exited (status {self.process.wait()})")
        return json.loads(line)

    def run(self, case: str, path: str, mode: str) -> dict[str, Any]:
        """Time one pass over ``case``."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"case": case, "path": path, "mode": mode}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End the process."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


@contextlib.contextmanager
def baseline_checkout(ref: str) -> Iterator[Path]:
    """A temporary detached git worktree of ``ref``, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="concord-baseline-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "--quiet", str(path), ref],
                       check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(path)], check=False)


@dataclass
class Row:
    """One case × path × mode: median seconds per revision, and whether their outputs were the same."""

    case: str
    path: str
    mode: str
    tokens_before: int
    tokens_after: int
    new_s: float
    old_s: float | None = None
    same: bool | None = None
    # Stage → share of the time, summed over the timed rounds (see `_compress_worker.STAGES`).
    new_stages: dict[str, float] | None = None
    old_stages: dict[str, float] | None = None

    @property
    def ratio(self) -> float | None:
        """Old time over new time."""
        return self.old_s / self.new_s if self.old_s is not None and self.new_s > 0 else None


def measure(new: Worker, old: Worker | None, cases: dict[str, Case], rounds: int) -> list[Row]:
    """Every case × path × mode; within a round the modes and the revisions alternate (new warm, old warm,
    new cold, old cold), so that drifting machine load hits every figure alike; the first round is dropped."""
    rows = []
    for case, path in itertools.product(cases, PATHS):
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for round_ in range(rounds + 1):
            for mode in MODES:
                for label, worker in (("new", new), ("old", old)):
                    if worker is not None:
                        answer = worker.run(case, path, mode)
                        if round_:
                            runs.setdefault((label, mode), []).append(answer)
        for mode in MODES:
            fresh = runs[("new", mode)]
            row = Row(case, path, mode, fresh[-1]["tokens_before"], fresh[-1]["tokens_after"],
                      statistics.median(r["seconds"] for r in fresh), new_stages=_stage_shares(fresh))
            if old is not None:
                base = runs[("old", mode)]
                row.old_s = statistics.median(r["seconds"] for r in base)
                row.old_stages = _stage_shares(base)
                row.same = all(a["digests"] == b["digests"] for a, b in zip(fresh, base, strict=True))
            rows.append(row)
            _print_row(row)
    return rows


def _stage_shares(answers: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each stage's share of the total time of ``answers``; "other" is what no stage timer covered."""
    total = sum(a["seconds"] for a in answers) or 1.0
    shares: dict[str, float] = {}
    for answer in answers:
        for stage, seconds in answer.get("stages", {}).items():
            shares[stage] = shares.get(stage, 0.0) + seconds / total
    shares["other"] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def _print_profile(rows: list[Row]) -> None:
    print("\nstage profile, llm path: share of the time (new; old below it with --baseline)")
    for row in rows:
        if row.path != "llm" or row.case not in PROFILED:
            continue
        for label, shares in (("new", row.new_stages), ("old", row.old_stages)):
            if shares:
                parts = ", ".join(f"{stage} {share:.0%}" for stage, share in
                                  sorted(shares.items(), key=lambda item: -item[1]) if share >= 0.005)
                print(f"  {row.case:<20}{row.mode:<5} {label}: {parts}")


def _print_header(baseline: bool) -> None:
    extra = f"{'old ms':>10}{'old/new':>9}  same" if baseline else ""
    print(f"{'case':<22}{'path':<8}{'mode':<6}{'tokens before → after':>24}{'new ms':>10}{'ms/100K':>9}{extra}")


def _print_row(row: Row) -> None:
    line = (f"{row.case:<22}{row.path:<8}{row.mode:<6}{row.tokens_before:>12,} → {row.tokens_after:>9,}"
            f"{row.new_s * 1e3:>10.1f}{row.new_s * 1e8 / max(row.tokens_before, 1):>9.1f}")
    if row.old_s is not None:
        line += f"{row.old_s * 1e3:>10.1f}{row.ratio:>8.2f}×  {'yes' if row.same else 'NO'}"
    print(line, flush=True)


def _report(rows: list[Row], sizes: Sequence[int]) -> bool:
    """Print growth, cold/warm and the targets; True when every target that could be checked is met."""
    by = {(r.case, r.path, r.mode): r for r in rows}
    ok = True
    print("\ngrowth (new, warm)            messages ×   time ×   target: time × ≤ messages ×")
    for path in PATHS:
        for small, large in itertools.pairwise(sizes):
            a, b = by.get((f"synthetic {small:,}", path, "warm")), by.get((f"synthetic {large:,}", path, "warm"))
            if a and b:
                growth, limit = b.new_s / a.new_s, large / small
                ok &= growth <= limit
                print(f"  {path:<6} {small:>7,} → {large:>7,}{limit:>10.1f}{growth:>9.2f}   "
                      f"{'met' if growth <= limit else 'NOT met'}")
    print(f"\ncold / warm (new, llm)        target ≤ {COLD_OVER_WARM_TARGET}")
    for (case, path, mode), row in by.items():
        warm = by.get((case, path, "warm"))
        if path == "llm" and mode == "cold" and warm is not None:
            share = row.new_s / warm.new_s
            ok &= share <= COLD_OVER_WARM_TARGET
            print(f"  {case:<26}{share:>6.2f}   {'met' if share <= COLD_OVER_WARM_TARGET else 'NOT met'}")
    print(f"\nledger share of a warm compaction (new, llm)   target ≤ {LEDGER_SHARE_TARGET:.0%}")
    for case in PROFILED:
        row = by.get((case, "llm", "warm"))
        if row is not None and row.new_stages is not None:
            share = row.new_stages.get("ledger", 0.0)
            ok &= share <= LEDGER_SHARE_TARGET
            print(f"  {case:<26}{share:>6.1%}   {'met' if share <= LEDGER_SHARE_TARGET else 'NOT met'}")
    if any(r.ratio is not None for r in rows):
        print("\nold/new, llm path            target")
        for mode, targets in TARGETS.items():
            for case, target in targets.items():
                row = by.get((case, "llm", mode))
                if row is not None and row.ratio is not None:
                    ok &= row.ratio >= target
                    print(f"  {case:<22}{mode:<5}{row.ratio:>6.2f}×  ≥ {target:.0f}×  "
                          f"{'met' if row.ratio >= target else 'NOT met'}")
        differing = [r for r in rows if r.same is False]
        if not differing:
            print("\noutputs identical to the baseline: all cases")
        elif len(differing) == len(rows):
            print(f"\noutputs identical to the baseline: none of {len(rows)} (the revisions summarize differently)")
        else:
            names = ", ".join(f"{r.case}/{r.path}/{r.mode}" for r in differing)
            print(f"\noutputs identical to the baseline: all but {len(differing)} of {len(rows)}: {names}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases, print the table and the targets; 0 when every checked target is met."""
    parser = argparse.ArgumentParser(prog="python -m bench.compress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", metavar="GITREF", help="also run this revision, interleaved, and print ratios")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per measurement (median; default 7)")
    parser.add_argument("--quick", action="store_true", help="no 100K-message session, 3 rounds")
    parser.add_argument("--cases", nargs="*", help="only the cases whose names start with these")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick and args.rounds == 7 else args.rounds
    sizes = [s for s in SIZES if not (args.quick and s > 20_000)]
    cases = build_cases(load_all(), sizes)
    if args.cases:
        cases = {k: v for k, v in cases.items() if any(k.startswith(p) for p in args.cases)}
    if not cases:
        print("no cases: the corpus folder is missing (set CONCORD_CORPUS_DIR)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="concord-bench-compress-") as tmp, contextlib.ExitStack() as stack:
        cases_file = Path(tmp) / "cases.pickle"
        cases_file.write_bytes(pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL))
        new = Worker(REPO_ROOT, cases_file)
        stack.callback(new.close)
        old = None
        if args.baseline:
            old = Worker(stack.enter_context(baseline_checkout(args.baseline)), cases_file)
            stack.callback(old.close)
        held = "counts" + (" (new only)" if old and not old.takes_counts else "")
        if new.takes_prepared:
            held += " and prepared records" + (" (new only)" if old and not old.takes_prepared else "")
        print(f"median of {rounds} rounds after a warm-up"
              + (f", interleaved with {args.baseline} (old)" if old else "") + f"; cold: {held} from the caller")
        _print_header(old is not None)
        rows = measure(new, old, cases, rounds)
        _print_profile(rows)
        ok = _report(rows, sizes)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
