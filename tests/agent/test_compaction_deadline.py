"""A compaction whose summary model trickles or hangs holds the chat at most its stated deadline, posts a
progress line meanwhile, and ends with the static summary: the turn is still answered."""

from __future__ import annotations

import time

from agent.compression.compressor import ContextCompressor
from agent.compression.summary import SUMMARIZER_SYSTEM
from agent.events import NoticeKind
from agent.llm.openai_compat import OpenAICompatProvider
from agent.loop import AgentLoop
from agent.tokens import get_counter
from agent.turn import LoopConfig, StopReason
from tests.agent.loop_support import Sinks, history
from tests.fakes.llm_server import FakeLLMServer, Reply


async def test_a_hanging_summary_model_is_cut_off_at_the_compaction_deadline(fake_llm: FakeLLMServer) -> None:
    get_counter()
    chat_answers = iter(["the answer"])

    def respond(body: dict) -> Reply:
        if SUMMARIZER_SYSTEM in str(body.get("messages")):
            return Reply("## Goal\n" + "slow " * 300, trickle=0.5, chunk_delay=0.5, text_pieces=20)  # never in time
        return Reply(next(chat_answers, "again"))

    fake_llm.responder = respond
    main = OpenAICompatProvider(fake_llm.openai_base_url, None, "main-model", timeout=30.0)
    summary = OpenAICompatProvider(fake_llm.openai_base_url, None, "summary-model", timeout=0.6)
    engine = ContextCompressor(context_length=8_000, summary_provider=summary, main_provider=main,
                               summary_deadline_seconds=1.2)
    sinks = Sinks()
    loop = AgentLoop(provider=main, engine=engine, system_prompt="You help.", session_id="s", notices=sinks.notice,
                     config=LoopConfig(progress_every_s=0.4))
    started = time.monotonic()
    result = await loop.run_turn(history(40, words=60), "what now?")
    held = time.monotonic() - started
    assert result.stop_reason is StopReason.FINAL and result.text == "the answer"
    assert held < 4.0, f"the compaction held the chat {held:.1f} s"
    [compaction] = result.compactions
    assert compaction.result.summary_kind == "static"
    assert "compaction deadline" in engine.last_compress_reason or "timed out" in engine.last_compress_reason
    progress = [n for n in sinks.notices if n.kind is NoticeKind.STILL_COMPACTING]
    assert progress and progress[0].text.startswith("⏳ Still compacting the conversation")
    await main.aclose()
    await summary.aclose()
