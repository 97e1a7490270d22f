"""Trigger ③ of the agent loop: what a failed LLM call leads to (R-P3) — `ErrorRecovery`, a mixin of `AgentLoop`.

`agent.recovery.plan_recovery` decides from the error alone (learn a stated window, shrink the answer or the
images, compress, or stop with which text); this carries the plan out on the turn, with the anti-thrashing
that spares a session a summary call and a "compacting" notice on every turn whose calls all overflow.
"""

from __future__ import annotations

import logging

from agent.compression.engine import ContextEngine
from agent.engine_hooks import lower_context_length, record_ineffective
from agent.events import aborted_notice
from agent.llm.errors import ContextOverflow, LLMError
from agent.llm.images import ashrink_images_in_messages
from agent.llm.window import LEARNED_OVERFLOW
from agent.recovery import Action, budget_spent_text, no_output_room_text, plan_recovery, still_too_large_text
from agent.turn import LoopConfig
from agent.turn_state import Stop, Turn

__all__ = ["ErrorRecovery"]

# The loop's own logger, so that its lines name the loop whichever module of it writes them.
log = logging.getLogger("agent.loop")

# Turns in a row whose overflow recovery failed, after which a turn tries none until a call succeeds.
_FAILED_RECOVERY_LIMIT = 1


class ErrorRecovery:
    """Recovery from a failed call; `AgentLoop`'s method (it sets these fields; `_learn_window` and
    `_exact_request_tokens` are `WindowFitting`'s, `_compress` is `TurnCompaction`'s)."""

    engine: ContextEngine
    system_prompt: str
    config: LoopConfig
    _failed_recoveries: int

    async def _recover(self, turn: Turn, error: LLMError) -> None:
        log.info("LLM call failed (%s: %s); planning recovery", type(error).__name__, error.message)
        plan = plan_recovery(
            error, context_length=self.engine.context_length, max_tokens=turn.max_tokens,
            compressions_used=turn.compressions_used, max_compressions=self.config.max_compression_attempts,
            output_shrinks_left=self.config.max_output_shrinks - turn.output_shrinks,
            images_shrunk=turn.images_shrunk > 0)
        if plan.context_length is not None:
            if isinstance(error, ContextOverflow):
                await self._learn_window(turn, plan.context_length, LEARNED_OVERFLOW)
            else:
                lower_context_length(self.engine, plan.context_length)
        if plan.action is Action.SHRINK_OUTPUT:
            turn.output_shrinks += 1
            turn.max_tokens = plan.max_tokens
        elif plan.action is Action.SHRINK_IMAGES:
            shrunk, changed = await ashrink_images_in_messages(turn.messages)
            if not changed:
                raise Stop("⚠️ The model rejected an image as too large, and no image in this conversation "
                            "could be re-encoded. Use /new to start without it.")
            turn.messages = [dict(m) for m in shrunk]
            turn.images_shrunk += changed
        elif plan.action is Action.COMPRESS:
            if turn.compressions_used:
                # The previous recovery compression of this turn did not make the request fit.
                record_ineffective(self.engine)
            elif self._failed_recoveries >= _FAILED_RECOVERY_LIMIT:
                raise Stop(still_too_large_text())
            turn.compressions_used += 1
            tokens = self._exact_request_tokens(turn.messages, self.schemas())
            result = await self._compress(turn, "recovery", tokens, force=True)
            if result.aborted:
                raise Stop(aborted_notice(result.reason).text, notified=turn.told_aborted)
            if not result.compressed:
                self._failed_recoveries += 1
                raise Stop(budget_spent_text(turn.compressions_used, can_compress=False)
                            if turn.compressions_used > 1 else
                            "⚠️ The conversation is too large for the model and nothing more can be compressed. "
                            "Use /new to start a fresh session.")
        elif plan.budget_spent or plan.no_output_room:
            framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
            can_compress = self.engine.has_content_to_compress(framed)
            if plan.no_output_room:
                raise Stop(no_output_room_text(can_compress=can_compress))
            self._failed_recoveries += 1
            raise Stop(budget_spent_text(turn.compressions_used, can_compress=can_compress))
        else:
            raise Stop(plan.text)
