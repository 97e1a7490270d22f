"""One revision's side of ``bench.compress``: a process that compresses the prepared cases on request.

Started by `bench.compress` as ``python bench/_compress_worker.py ROOT CASES`` with ROOT — this checkout or
a temporary worktree of the baseline revision — first on ``sys.path``, so ``agent`` is that revision's. It
uses only what every revision has (``ContextCompressor``, ``get_counter``, the provider base), plus
``compress(token_counts=…)`` where the revision declares ``accepts_token_counts``.

Protocol, one JSON object per line: it prints ``{"agent": path}`` once ready, then answers every request
``{"case": name, "path": "llm"|"static", "mode": "warm"|"cold"}`` read from stdin with ``{"seconds": …,
"tokens_before": …, "tokens_after": …, "digests": […]}``: the time of the compressions alone, and per
compression a digest of what it produced (messages, summary kind, token figures, and the summary prompt
on the LLM path), so two revisions' outputs can be compared without shipping them.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import hashlib
import json
import pickle
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

# The fixed reply of the instant summary model: the 13 sections of the template, about 6,000 characters.
SUMMARY = "\n".join(
    f"## {title}\n" + " ".join(f"{title.lower()} detail {i}: kept the exact value /srv/app/file_{i}.py" for i in range(8))
    for title in ("Historical Task Snapshot", "Goal", "Constraints & Preferences", "Completed Actions",
                  "Active State", "Historical In-Progress State", "Blocked", "Key Decisions", "Resolved Questions",
                  "Historical Pending User Asks", "Relevant Files", "Historical Remaining Work", "Critical Context")
)
TODAY = datetime.date(2026, 7, 1)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def serve(cases_path: str) -> None:
    """Answer requests on stdin until it closes."""
    import agent
    from agent.compression.compressor import ContextCompressor
    from agent.llm.base import Completion, Provider
    from agent.tokens import get_counter

    class InstantSummary(Provider):
        """A summary model that answers at once with `SUMMARY` and remembers the prompt it was sent."""

        name = "instant"
        model = "instant-summary"

        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def complete(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> Completion:
            self.prompts.append(str(messages[-1].get("content")))
            return Completion({"role": "assistant", "content": SUMMARY})

    with open(cases_path, "rb") as fh:
        cases: dict[str, list[tuple[list[dict[str, Any]], int]]] = pickle.load(fh)
    counter = get_counter()
    takes_counts = bool(getattr(ContextCompressor, "accepts_token_counts", False))
    held_counts: dict[str, list[list[int]]] = {}
    loop = asyncio.new_event_loop()
    print(json.dumps({"agent": agent.__file__, "takes_counts": takes_counts}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        items = cases[request["case"]]
        llm, cold = request["path"] == "llm", request["mode"] == "cold"
        if request["case"] not in held_counts:  # what a caller (store, ledger) holds: counted once, untimed
            held_counts[request["case"]] = [[counter.count_message(m) for m in messages] for messages, _ in items]
        seconds, before, after, digests = 0.0, 0, 0, []
        gc.collect()
        for (messages, window), counts in zip(items, held_counts[request["case"]], strict=True):
            provider = InstantSummary() if llm else None
            compressor = ContextCompressor(context_length=window, summary_provider=provider, today=lambda: TODAY)
            if cold:
                counter._cache.clear()  # none of these messages was counted in this process
            else:
                for message in messages:  # the agent's ledger has counted them already
                    counter.count_message(message)
            kwargs = {"token_counts": counts} if cold and takes_counts else {}
            started = time.perf_counter()
            result = loop.run_until_complete(compressor.compress(messages, force=True, **kwargs))
            seconds += time.perf_counter() - started
            before, after = before + result.tokens_before, after + result.tokens_after
            digests.append(_digest(result.messages, result.summary_kind, result.tokens_before, result.tokens_after,
                                   provider.prompts if provider else None))
        print(json.dumps({"seconds": seconds, "tokens_before": before, "tokens_after": after, "digests": digests}),
              flush=True)


if __name__ == "__main__":
    # sys.path[0] is this script's folder; the revision under test takes its place.
    sys.path[0] = sys.argv[1]
    serve(sys.argv[2])
