"""One revision's side of ``bench.compress``: a process that compresses the prepared cases on request.

Started by `bench.compress` as ``python bench/_compress_worker.py ROOT CASES`` with ROOT — this checkout or
a temporary worktree of the baseline revision — first on ``sys.path``, so ``agent`` is that revision's. It
uses only what every revision has (``ContextCompressor``, ``get_counter``, the provider base), plus
``compress(token_counts=…)`` where the revision declares ``accepts_token_counts``.

Protocol, one JSON object per line: it prints ``{"agent": path}`` once ready, then answers every request
``{"case": name, "path": "llm"|"static", "mode": "warm"|"cold"}`` read from stdin with ``{"seconds": …,
"tokens_before": …, "tokens_after": …, "digests": […], "stages": {…}}``: the time of the compressions
alone, per compression a digest of what it produced (messages, summary kind, token figures, and the summary
prompt on the LLM path), so two revisions' outputs can be compared without shipping them, and the seconds
spent in each stage of the pipeline (`STAGES`, timed by wrapping the compressor's methods).

Warm and cold are what a gateway process holds. Warm: it stored these messages, so it has counted them and,
where the revision has `remember_facts`, found their evidence facts (both untimed, as the gateway does them
off the answer's path). Cold: it has just restarted: no count and no fact in memory, the store's counts
handed over.
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
# Stage → the ContextCompressor method that runs it (a stage's time excludes the stages it calls).
STAGES = {"ledger": "_ledger", "summary prompt": "_summary_prompt", "prune and boundaries": "_plan",
          "clipping": "_clip", "clipped counts": "_clipped_counts", "input counts": "_input_counts",
          "assembly": "_assemble", "static summary": "_static_body"}


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def _timed_stages(cls: type, spent: dict[str, float]) -> None:
    """Wrap the stage methods of ``cls`` that this revision has so that each adds its own time to ``spent``."""
    inner: list[float] = []  # per running stage, the time of the stages it called

    for stage, name in STAGES.items():
        method = getattr(cls, name, None)
        if method is None:
            continue

        def timed(*args: Any, _method: Any = method, _stage: str = stage, **kwargs: Any) -> Any:
            started = time.perf_counter()
            inner.append(0.0)
            try:
                return _method(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                spent[_stage] = spent.get(_stage, 0.0) + elapsed - inner.pop()
                if inner:
                    inner[-1] += elapsed

        setattr(cls, name, staticmethod(timed) if isinstance(cls.__dict__.get(name), staticmethod) else timed)


def serve(cases_path: str) -> None:
    """Answer requests on stdin until it closes."""
    import agent
    from agent.compression import evidence
    from agent.compression.compressor import ContextCompressor
    from agent.llm.base import Completion, Provider
    from agent.tokens import get_counter

    # This change's per-message facts: what a restarted process has lost, what the gateway finds on storing.
    clear_facts = getattr(evidence, "clear_fact_cache", lambda: None)
    remember_facts = getattr(evidence, "remember_facts", lambda messages: None)
    spent: dict[str, float] = {}
    _timed_stages(ContextCompressor, spent)

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
        spent.clear()
        gc.collect()
        for (messages, window), counts in zip(items, held_counts[request["case"]], strict=True):
            provider = InstantSummary() if llm else None
            compressor = ContextCompressor(context_length=window, summary_provider=provider, today=lambda: TODAY)
            if cold:
                counter._cache.clear()  # none of these messages was counted in this process
                clear_facts()
            else:
                for message in messages:  # the agent's ledger has counted them already
                    counter.count_message(message)
                remember_facts(messages)
            kwargs = {"token_counts": counts} if cold and takes_counts else {}
            started = time.perf_counter()
            result = loop.run_until_complete(compressor.compress(messages, force=True, **kwargs))
            seconds += time.perf_counter() - started
            before, after = before + result.tokens_before, after + result.tokens_after
            digests.append(_digest(result.messages, result.summary_kind, result.tokens_before, result.tokens_after,
                                   provider.prompts if provider else None))
        print(json.dumps({"seconds": seconds, "tokens_before": before, "tokens_after": after, "digests": digests,
                          "stages": spent}), flush=True)


if __name__ == "__main__":
    # sys.path[0] is this script's folder; the revision under test takes its place.
    sys.path[0] = sys.argv[1]
    serve(sys.argv[2])
