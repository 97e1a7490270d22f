"""One revision's side of ``bench.compress``: a process that compresses the prepared cases on request.

Started by `bench.compress` as ``python bench/_compress_worker.py ROOT CASES`` with ROOT — this checkout or
a temporary worktree of the baseline revision — first on ``sys.path``, so ``agent`` is that revision's. It
uses only what every revision has (``ContextCompressor``, ``get_counter``, the provider base), plus
``compress(token_counts=…)`` where the revision declares ``accepts_token_counts`` and ``compress(prepared=…)``
where it declares ``accepts_prepared``.

Protocol, one JSON object per line: it prints ``{"agent": path}`` once ready, then answers every request
``{"case": name, "path": "llm"|"static", "mode": "warm"|"cold"}`` read from stdin with ``{"seconds": …,
"tokens_before": …, "tokens_after": …, "digests": […], "stages": {…}}``: the time of the compressions
alone, per compression a digest of what it produced (messages, summary kind, token figures, and the summary
prompt on the LLM path), so two revisions' outputs can be compared without shipping them, and the seconds
spent in each stage of the pipeline (`STAGES`, timed by wrapping the compressor's methods).

Warm and cold are what a gateway process holds. Warm: it stored these messages, so it has counted them and
handed them to the engine's ``on_messages_stored`` where the revision has it (its evidence facts and summary
blocks prepared; else ``remember_facts`` where the revision has that), untimed, as the gateway does it off
the answer's path. Cold: a gateway compressing a session after a restart: no count, no fact and no block in
memory, and the caller hands over what the store keeps per row — the counts and, where the revision
``accepts_prepared``, the prepared records. Both are made once per case, untimed: the counts by counting, the
records by handing the messages to ``on_messages_stored`` in a fresh state (what it returned when they were
stored), after which the caches are cleared as for any cold compression.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import hashlib
import importlib
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
# Stage → what runs it, in either layout of the compressor: the methods of the one-class compressor
# (``ContextCompressor._plan`` …) and the module functions its split version calls (``module:name``, or
# ``module:Class.name``). What a revision lacks is skipped; a stage's time excludes the stages it calls.
STAGES = {
    "ledger": ("agent.compression.compressor:ContextCompressor._ledger", "agent.compression.compressor:middle_ledger",
               "agent.compression.ledger:Ledger.merge"),
    "summary prompt": ("agent.compression.compressor:ContextCompressor._summary_prompt",
                       "agent.compression.summary_job:SummaryJob.split",
                       "agent.compression.summary_job:SummaryJob.request"),
    "prune and boundaries": ("agent.compression.compressor:ContextCompressor._plan", "agent.compression.plan:make_plan"),
    "clipping": ("agent.compression.compressor:ContextCompressor._clip", "agent.compression.plan:_clip"),
    "clipped counts": ("agent.compression.compressor:ContextCompressor._clipped_counts",
                       "agent.compression.plan:_recounted"),
    "input counts": ("agent.compression.compressor:ContextCompressor._input_counts",
                     "agent.compression.compressor:input_counts"),
    "assembly": ("agent.compression.compressor:ContextCompressor._assemble",
                 "agent.compression.compressor:assemble_counted"),
    "static summary": ("agent.compression.compressor:ContextCompressor._static_body",),
    # Reading the prepared records (cold); what the messages then take from them falls in the stages that ask.
    "prepared records": ("agent.compression.compressor:adopt_records",),
}


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def _owner(target: str) -> tuple[Any, str] | None:
    """The object holding ``target``'s attribute and the attribute's name (None when the revision lacks it)."""
    module_name, _, dotted = target.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    *path, name = dotted.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    return (owner, name) if owner is not None and hasattr(owner, name) else None


def _timed_stages(spent: dict[str, float]) -> None:
    """Wrap what runs each stage in this revision so that each adds its own time to ``spent``."""
    inner: list[float] = []  # per running stage, the time of the stages it called

    for stage, targets in STAGES.items():
        for target in targets:
            found = _owner(target)
            if found is None:
                continue
            owner, name = found
            method = getattr(owner, name)

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

            static = isinstance(owner, type) and isinstance(owner.__dict__.get(name), staticmethod)
            setattr(owner, name, staticmethod(timed) if static else timed)


def serve(cases_path: str) -> None:
    """Answer requests on stdin until it closes."""
    import agent
    from agent.compression import evidence
    from agent.compression.compressor import ContextCompressor
    from agent.llm.base import Completion, Provider
    from agent.tokens import get_counter

    # What a restarted process has lost: the per-message facts and summary blocks, where the revision keeps them.
    try:
        from agent.compression.blocks import clear_block_cache
    except ImportError:
        clear_block_cache = lambda: None  # noqa: E731
    clear_facts = getattr(evidence, "clear_fact_cache", lambda: None)
    try:  # and the records it made or read, where it keeps them
        from agent.compression.prepared import forget_prepared
    except ImportError:
        forget_prepared = lambda: None  # noqa: E731
    remember_facts = getattr(evidence, "remember_facts", lambda messages: None)
    # What the gateway does with the messages it stores: the engine's hook where the revision has one.
    stored = getattr(ContextCompressor, "on_messages_stored", None)
    spent: dict[str, float] = {}
    _timed_stages(spent)

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
    takes_prepared = bool(getattr(ContextCompressor, "accepts_prepared", False))
    held_counts: dict[str, list[list[int]]] = {}
    held_records: dict[str, list[Any]] = {}
    loop = asyncio.new_event_loop()

    def forget() -> None:
        counter._cache.clear()  # none of these messages was counted in this process
        clear_facts()
        clear_block_cache()
        forget_prepared()

    print(json.dumps({"agent": agent.__file__, "takes_counts": takes_counts, "takes_prepared": takes_prepared}),
          flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        case = request["case"]
        items = cases[case]
        llm, cold = request["path"] == "llm", request["mode"] == "cold"
        if case not in held_counts:  # what a caller (store, ledger) holds: counted once, untimed
            held_counts[case] = [[counter.count_message(m) for m in messages] for messages, _ in items]
        if takes_prepared and case not in held_records:  # what the store kept as they were stored: made once, untimed
            held_records[case] = []
            for messages, window in items:
                forget()
                engine = ContextCompressor(context_length=window, summary_provider=None, today=lambda: TODAY)
                held_records[case].append(engine.on_messages_stored(messages))
        seconds, before, after, digests = 0.0, 0, 0, []
        spent.clear()
        gc.collect()
        records_of = held_records.get(case, [None] * len(items))
        for (messages, window), counts, records in zip(items, held_counts[case], records_of, strict=True):
            provider = InstantSummary() if llm else None
            compressor = ContextCompressor(context_length=window, summary_provider=provider, today=lambda: TODAY)
            kwargs: dict[str, Any] = {}
            if cold:
                forget()
                if takes_counts:
                    kwargs["token_counts"] = counts
                if takes_prepared:
                    kwargs["prepared"] = records
            else:
                for message in messages:  # the agent's ledger has counted them already
                    counter.count_message(message)
                if stored is not None:
                    compressor.on_messages_stored(messages)
                else:
                    remember_facts(messages)
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
