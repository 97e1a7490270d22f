"""`ContextCompressor`: the built-in context engine — prune, cut, summarize, assemble (R-C0…R-C10).

The stages are pure functions in their own modules, and so is a compaction's bookkeeping (`accounting`); the
window and its budgets (`compressor_window`) and the read-outs of the state (`state_view`) are mixins. This
class owns the per-conversation state (`CompressorState`), the ContextEngine hooks and the order of the pipeline:

    plan (clip, guard R-C0, prune R-C1, boundaries R-C2, summary budget — at the escalation level)
        → summary (R-C3/4, R-C8; in parts when the middle is larger than the summary window) → shorten
        → assemble (R-C5) → anti-thrash by escalation (R-C6)

Notes for the agent loop author:
- ``should_compress(tokens)`` is the trigger: False below ``threshold_tokens``. Compression is never switched
  off: a compression that saved less than 10% (or left the request nearly full) makes the next one cut
  harder (`agent.compression.escalation`), until one helps.
- After a compression ``last_prompt_tokens`` is -1 ("just compressed, waiting for real usage"); call
  ``update_from_response(usage)`` after every main-model call (only ``prompt_tokens`` is used).
- ``deferred_to_real_usage`` (R-P1): True once, after a compression, the provider's real ``prompt_tokens`` were
  below the threshold, and while every later report stays below it. The preflight may then skip its rough
  (schema-heavy, over-counting) estimate and leave the decision to the post-response check, which uses real
  numbers. It turns False on the next compression, on a report at/over the threshold, or on a call that
  reported no usage.
- ``set_request_overhead(tokens)``: what every request carries besides its messages (the tool schemas), so
  a compaction plans its result against the whole request.
- A compression that aborts (R-C8) returns the messages unchanged with ``aborted=True`` and a ``reason``
  ending in "conversation frozen, run /compress to retry or /new" — show it to the user.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.compression.accounting import assemble_counted, helped, input_counts, kept_counts, middle_ledger
from agent.compression.assemble import sanitize_tool_pairs, strip_historical_media
from agent.compression.boundaries import Boundaries
from agent.compression.clip import ClipResult
from agent.compression.compressor_window import CompressorWindow
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.fallback import build_static_summary
from agent.compression.feasibility import SummaryModelTooSmall
from agent.compression.plan import CompactionPlan, select_plan
from agent.compression.prepared import RECORD_MIN_CHARS, adopt_records, prepare_records
from agent.compression.prune import PruneResult
from agent.compression.shorten import shorten_summary
from agent.compression.state import CompressorState
from agent.compression.state_view import CompressorStateView
from agent.compression.summarizer import ABORT_WARNING, SummaryOutcome, summary_call_allowed
from agent.compression.summary import derive_focus_topic, find_latest_summary, format_summary
from agent.compression.summary_job import SummaryJob, summarize_in_parts
from agent.compression.threshold import autoraised_threshold_percent, summary_ceiling
from agent.llm.base import Provider, Usage
from agent.llm.window import LEARNED_OVERFLOW, ServedWindow
from agent.tokens import get_counter

__all__ = ["ContextCompressor"]

log = logging.getLogger(__name__)


Messages = list[dict[str, Any]]


class ContextCompressor(CompressorStateView, CompressorWindow, ContextEngine):
    """Lossy compression into protected head + structured summary + verbatim tail."""

    accepts_token_counts = True
    accepts_prepared = True
    # Messages shorter than this that call no tool and are no tool's result get no prepared record (see there).
    record_min_chars = RECORD_MIN_CHARS
    accepts_ahead_of_need = True

    def __init__(
        self,
        *,
        context_length: int,
        threshold: float = 0.50,
        target_ratio: float = 0.20,
        protect_first_n: int = 3,
        protect_last_n: int = 20,
        max_tokens: int | None = None,
        summary_provider: Provider | None,
        main_provider: Provider | None = None,
        summary_context_length: int | None = None,
        abort_on_summary_failure: bool = False,
        encoding: str = "o200k_base",
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] | None = None,
        provider_name: str = "",
        model: str = "",
        autoraise: bool = True,
        wall_clock: Callable[[], float] = time.time,
        summary_deadline_seconds: float | None = None,
        reserve_output: bool = False,
        summary_window: ServedWindow | None = None,
    ) -> None:
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if not 0 < threshold <= 1 or not 0 < target_ratio < 1:
            raise ValueError("threshold must be in (0, 1] and target_ratio in (0, 1)")
        if protect_first_n < 0 or protect_last_n < 0:
            raise ValueError("protect_first_n and protect_last_n must be >= 0")
        self.threshold_percent = autoraised_threshold_percent(provider_name, model, threshold, enabled=autoraise)
        self.target_ratio = target_ratio
        self.protect_first_n = protect_first_n
        self.protect_last_n = protect_last_n
        self._configured_max_tokens = max_tokens
        # True (the gateway): without max_tokens, answers get a share of the window, which follows the window.
        self._reserve_output = reserve_output
        self.summary_context_length = summary_context_length
        self.abort_on_summary_failure = abort_on_summary_failure
        self.summary_deadline_seconds = summary_deadline_seconds
        self._summary_provider = summary_provider
        self._main_provider = main_provider
        self._counter = get_counter(encoding)
        self._clock = clock
        self._wall_clock = wall_clock
        self._today = today or datetime.date.today
        self._state = CompressorState()
        self.session_id: str | None = None
        self.last_compression: CompressionResult | None = None
        self._first_seq = 1
        # The window and output reserve of the model the engine was built for, and of the one answering now
        # (`use_window`: failover, /model).
        self._home_window = self._model_window = (context_length, max_tokens)
        # Tokens every request carries besides its messages (tool schemas): the agent says (set_request_overhead).
        self._overhead = 0
        # The summary model's served window, shared by every session on it: what its server states is learned.
        self._summary_window = summary_window
        self._summary_frame = self._counter.count_text(format_summary(""))
        self._apply_context_length(context_length)

    # -- state ------------------------------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """JSON-serializable state for persistence (cooldowns as wall-clock expiry)."""
        own = self._model_window == self._home_window
        return self._state.export(monotonic_now=self._clock(), wall_now=self._wall_clock(),
                                  context_length=self.context_length if own else self._home_window[0])

    def load_state(self, data: Mapping[str, Any]) -> None:
        """Restore `export_state` output; a smaller saved context length (error recovery) is re-applied."""
        self._state = CompressorState.load(dict(data), monotonic_now=self._clock(), wall_now=self._wall_clock())
        saved_length = data.get("context_length")
        if isinstance(saved_length, int) and 0 < saved_length < self.context_length:
            self._apply_context_length(saved_length)

    # -- ContextEngine hooks ----------------------------------------------------------------------------

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True at or over the threshold. Never switched off: anti-thrashing escalates instead (R-C6)."""
        tokens = self._state.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return max(tokens, 0) >= self.threshold_tokens

    def update_from_response(self, usage: Usage | None) -> None:
        """Record the real prompt tokens of the last call (completion tokens are ignored: reasoning inflates them)."""
        state = self._state
        prompt = usage.prompt_tokens if usage is not None else 0
        state.last_prompt_tokens = max(prompt, 0)
        if prompt <= 0:
            state.real_usage_fits = False
            return
        if state.awaiting_real_usage:
            state.awaiting_real_usage = False
            state.real_usage_fits = prompt < self.threshold_tokens
        elif prompt >= self.threshold_tokens:
            state.real_usage_fits = False

    def on_session_start(self, session_id: str, messages: Sequence[Mapping[str, Any]] = ()) -> None:
        """Bind to a session and rehydrate the previous summary from a handoff found in ``messages`` (R-C7)."""
        self.session_id = session_id
        self._rehydrate(messages)

    def on_session_end(self, session_id: str) -> None:
        """The session ended: its summary must not leak into another one."""
        self._state.previous_summary = None

    def on_session_reset(self) -> None:
        """``/new``: forget counters, summary and failure flags (provider cooldowns stay)."""
        self._state.reset()
        self.last_compression = None

    def number_messages(self, first_seq: int) -> None:
        """Message numbers for the ledger: the first non-system message is ``first_seq`` (default 1)."""
        self._first_seq = first_seq

    def on_messages_stored(self, messages: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """Find the evidence facts of ``messages`` (and count their texts) and their blocks of the summary prompt
        now, so that the compaction that summarizes them only assembles them (neither ever changes; both are
        kept in bounded in-process caches). Returns each message's prepared record (`prepare_records`): kept
        with the message and handed back to ``compress(prepared=…)`` after a restart, it puts them back."""
        return prepare_records(messages, self._counter, min_chars=self.record_min_chars)

    def record_ineffective(self) -> None:
        """Count a compression that did not help although it saved tokens (overflow recovery whose retry
        overflowed again) toward anti-thrashing (R-C6)."""
        self._state.ineffective_count += 1

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]],
                                token_counts: Sequence[int] | None = None,
                                prepared: Sequence[str | None] | None = None) -> bool:
        """False when everything is in the protected head/tail and no message needs clipping, so /compress
        needs no LLM call (R-C10).

        ``token_counts`` and ``prepared`` as for `compress` (the plan prunes: a record spares it the work)."""
        if prepared is not None:
            adopt_records(messages, prepared, self._counter)
        plan = self._select_plan(messages, input_counts(messages, token_counts, self._counter))
        return plan.clip.clipped > 0 or plan.bounds is not None

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False,
                       token_counts: Sequence[int] | None = None,
                       prepared: Sequence[str | None] | None = None) -> bool:
        """True only when compress() would call the summary model now: there is a middle, a summary provider,
        no cooldown (unless ``force``) and no escalation to the static summary. Otherwise it would insert the
        static summary or abort, unpaid. ``token_counts`` and ``prepared`` as for `compress`."""
        if not summary_call_allowed(self._state, self._summary_provider, now=self._clock(), force=force):
            return False
        if prepared is not None:
            adopt_records(messages, prepared, self._counter)
        plan = self._select_plan(messages, input_counts(messages, token_counts, self._counter))
        return plan.bounds is not None and not plan.escalation.static

    # -- the pipeline -----------------------------------------------------------------------------------

    def _rehydrate(self, messages: Sequence[Mapping[str, Any]]) -> None:
        # A remembered summary absent from these messages came from another session: drop it.
        self._state.previous_summary = find_latest_summary(messages)

    def _select_plan(self, messages: Sequence[Mapping[str, Any]], counts: Sequence[int],
                     has_summary: bool | None = None, *, ahead_of_need: bool = False) -> CompactionPlan:
        """The compaction to make now (see `agent.compression.plan`).

        ``has_summary``: whether ``messages`` hold a handoff summary, when the caller has just looked. Decided
        from the messages, not the remembered summary: compress() drops a summary these messages do not
        contain (R-C7), and has_content_to_compress must predict that compress() exactly (R-C10).
        ``ahead_of_need``: planned with the room the request has left below the threshold as its lead.
        """
        if has_summary is None:
            has_summary = find_latest_summary(messages) is not None
        decayed = self._state.compression_count >= 1 or has_summary
        lead = max(0, self.threshold_tokens - sum(counts) - self._overhead) if ahead_of_need else 0
        return select_plan(messages, counts, self._plan_settings(lead), self._state.ineffective_count,
                           decayed=decayed, counter=self._counter)

    def _unchanged(
        self, messages: Messages, counts: Sequence[int], reason: str, *, aborted: bool = False,
        ineffective: bool = False,
    ) -> CompressionResult:
        state = self._state
        if ineffective:
            state.ineffective_count += 1
        state.last_compress_aborted = aborted
        state.last_compress_reason = reason
        return self._record(CompressionResult(messages, False, len(messages), len(messages), sum(counts),
                                              sum(counts), "none", aborted, reason, token_counts=tuple(counts)))

    def _record(self, result: CompressionResult) -> CompressionResult:
        self.last_compression = result
        self._state.last_stats = result.stats()
        return result

    async def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        token_counts: Sequence[int] | None = None,
        ahead_of_need: bool = False,
        prepared: Sequence[str | None] | None = None,
    ) -> CompressionResult:
        """Compress ``messages`` once; the input is never mutated.

        ``current_tokens`` (the caller's request-level figure) is not used for decisions: before/after and
        savings are exact counts of the message lists, so they compare like with like. ``force`` (manual
        /compress) bypasses summary-model cooldowns. ``token_counts``, one exact count per message (the
        agent's ledger and the store hold them), spare re-tokenizing the input; each message is otherwise
        counted once, and that one list serves planning, the summary budget and the totals.
        The result's ``token_counts`` are those of its messages. ``ahead_of_need``: a compaction started below the
        threshold while nobody waits; it cuts as the threshold's would, so the next one is as far away
        (`agent.compression.plan`). ``prepared``: one record per message, as `on_messages_stored` returned it when
        the message was stored (the store keeps them), handed back after a restart: what a valid record holds is
        not computed again (`agent.compression.prepared`); records that are not one per message are ignored.
        """
        original: Messages = [m if isinstance(m, dict) else dict(m) for m in messages]
        if prepared is not None:
            adopt_records(original, prepared, self._counter)
        self._rehydrate(original)
        counts = input_counts(original, token_counts, self._counter)
        tokens_before = sum(counts)
        # _rehydrate has just looked for a summary in these very messages.
        plan = self._select_plan(original, counts, self._state.previous_summary is not None,
                                 ahead_of_need=ahead_of_need)
        if plan.bounds is None and plan.clip.clipped:
            return self._commit_clip(original, plan.clip, counts)
        if plan.pruned is None:
            return self._unchanged(original, counts, "nothing to compress: too few messages")
        if plan.bounds is None:
            return self._unchanged(original, counts,
                                   "nothing to compress: everything is in the protected head and tail",
                                   ineffective=True)
        work, bounds = plan.pruned.messages, plan.bounds
        middle = work[bounds.head_end : bounds.tail_start]
        outcome = await self._summarize(plan, middle, work, focus_topic, force)
        if outcome.abort:
            if plan.clip.clipped:
                return self._commit_clip(original, plan.clip, counts)
            return self._unchanged(original, counts,
                                   f"Context compression aborted ({outcome.reason}): {ABORT_WARNING}", aborted=True)
        kind, failure = ("llm" if outcome.body is not None else "static"), outcome.reason
        if outcome.body is not None:
            # Paid for: a summary longer than asked (or cut at max_tokens) is shortened, never thrown away.
            text = shorten_summary(outcome.body, plan.summary_budget, self._counter, cut_off=outcome.cut_off)
        else:
            # The static summary has caps of its own, meant for large windows: here it takes at most what any
            # summary may take in this window.
            ceiling = summary_ceiling(self.context_length, self.threshold_tokens)
            text = shorten_summary(self._static_body(middle),
                                   max(plan.summary_budget, int(ceiling * plan.escalation.summary_share)),
                                   self._counter)
        ledger = middle_ledger(original, bounds, plan.summary_budget, first_seq=self._first_seq,
                               previous_summary=self._state.previous_summary, counter=self._counter)
        kept = kept_counts(work, plan.work_counts, bounds)
        body = ledger.merge(text)
        assembled, after_counts = assemble_counted(work, kept, bounds, body, self._counter)
        if sum(after_counts) >= tokens_before:
            # Still no shorter than what it replaces (a tiny middle): a summary half as long, then none but the
            # ledger's facts, before giving up.
            for share in (0.5, 0.0):
                text = shorten_summary(text, int(plan.summary_budget * share), self._counter)
                body = ledger.merge(text)
                assembled, after_counts = assemble_counted(work, kept, bounds, body, self._counter)
                if sum(after_counts) < tokens_before:
                    break
        if sum(after_counts) >= tokens_before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        return self._commit(original, assembled.messages, tokens_before, after_counts, bounds, plan.pruned, kind,
                            failure, body)

    # -- the summary: in parts, within the summary model's window ---------------------------------------

    async def _summarize(self, plan: CompactionPlan, middle: Messages, work: Messages, focus_topic: str | None,
                         force: bool) -> SummaryOutcome:
        """The summary of ``middle`` (None body: the caller writes the static one), learning the summary
        model's window and asking once more, in smaller parts, when its server refuses a prompt as too long."""
        if plan.escalation.static:
            return SummaryOutcome(None, reason="earlier compressions saved too little")
        outcome = await self._summarize_parts(plan, middle, work, focus_topic, force)
        if outcome.stated_window is not None:
            await self._learn_summary_window(outcome.stated_window)
            outcome = await self._summarize_parts(plan, middle, work, focus_topic, force)
        return outcome

    async def _learn_summary_window(self, tokens: int) -> None:
        self.summary_context_length = tokens
        if self._summary_window is not None:
            await self._summary_window.learn(tokens, LEARNED_OVERFLOW)
        try:
            self._apply_context_length(self.context_length)
        except SummaryModelTooSmall:  # too small to lower the threshold for: the parts cover the middle
            log.warning("the summary model's window (%s tokens) is far too small; summarizing in parts", tokens)

    async def _summarize_parts(self, plan: CompactionPlan, middle: Messages, work: Messages,
                               focus_topic: str | None, force: bool) -> SummaryOutcome:
        job = SummaryJob(middle, plan.summary_budget, self.summary_context_length or self.context_length,
                         focus_topic or derive_focus_topic(work), focus_topic is None, self._state.previous_summary,
                         self._today(), self.summary_template, self._counter)
        return await summarize_in_parts(job, self._state, summary_provider=self._summary_provider,
                                        main_provider=self._main_provider, now=self._clock, force=force,
                                        abort_on_failure=self.abort_on_summary_failure,
                                        deadline_s=self.summary_deadline_seconds)

    # -- the outcome: committed or unchanged -----------------------------------------------------------

    def _commit_clip(self, original: Messages, clip: ClipResult, counts: Sequence[int]) -> CompressionResult:
        """Only clipping changed the list (no middle to summarize, or the summary aborted): keep that."""
        state, before = self._state, sum(counts)
        # The same repairs as every assembled list (tool pairs, unparsable arguments, historical media).
        messages = strip_historical_media(sanitize_tool_pairs(clip.messages)[0])[0]
        after_counts = self._counter.count_each(messages)
        after = sum(after_counts)
        if after >= before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        state.ineffective_count = (0 if helped(before, after, self._overhead, self.threshold_tokens)
                                   else state.ineffective_count + 1)
        state.last_prompt_tokens = -1
        state.awaiting_real_usage = True
        state.real_usage_fits = False
        state.last_compress_aborted = False
        state.last_compress_reason = f"clipped {clip.clipped} oversized message(s)"
        return self._record(CompressionResult(
            messages, True, len(original), len(messages), before, after, "none", False,
            state.last_compress_reason, 0, 0, 0, tuple(after_counts),
        ))

    def _static_body(self, middle: Messages) -> str:
        return build_static_summary(middle, today=self._today(), previous_summary=self._state.previous_summary)

    def _commit(
        self, original: Messages, result: Messages, before: int, after_counts: list[int], bounds: Boundaries,
        pruned: PruneResult, kind: str, failure: str, body: str,
    ) -> CompressionResult:
        state = self._state
        after = sum(after_counts)
        state.ineffective_count = (0 if helped(before, after, self._overhead, self.threshold_tokens)
                                   else state.ineffective_count + 1)
        state.compression_count += 1
        state.previous_summary = body
        state.last_prompt_tokens = -1
        state.awaiting_real_usage = True
        state.real_usage_fits = False
        state.last_compress_aborted = False
        state.last_compress_reason = f"static fallback summary ({failure})" if kind == "static" else ""
        return self._record(CompressionResult(
            result, True, len(original), len(result), before, after, kind, False, state.last_compress_reason,
            bounds.head_end, bounds.tail_start, pruned.pruned, tuple(after_counts),
        ))
