"""bench.retention scoring: evidence kept verbatim vs dropped into the summary, answers that must be literal."""

from __future__ import annotations

from bench.corpus import QA, Transcript
from bench.retention import measure


def _conversation() -> Transcript:
    messages = [{"role": "system", "content": "[Session 1 — 1 May 2023]"}]
    dia_index = {}
    for i in range(120):
        dia_index[f"D1:{i}"] = len(messages)
        speaker = "Ann" if i % 2 == 0 else "Bo"
        fact = f"My locker code is {4000 + i}." if i in (3, 117) else f"Small talk number {i} about the weather."
        messages.append({"role": "user", "name": speaker, "content": f"{fact} " + "filler words here. " * 20})
    qa = [
        QA("Early locker code?", "4003", ("D1:3",), 4),       # in the compacted middle
        QA("Late locker code?", "4117", ("D1:117",), 4),      # in the verbatim tail
        QA("Adversarial", "4003", ("D1:3",), 5),             # category 5 is never scored
        QA("Unstated", "purple elephant", ("D1:5",), 4),     # answer not in the conversation: not scorable
    ]
    return Transcript("locomo", "synthetic", messages, {"qa": qa, "dia_index": dia_index})


async def test_tail_evidence_is_kept_and_middle_evidence_is_not() -> None:
    cells, before, after = await measure(_conversation(), window_share=0.5)
    cell = cells[4]
    assert cell.questions == 2                       # adversarial and unstated answers are skipped
    assert cell.evidence_kept == 1                   # only the tail question's turn survives verbatim
    # The static summary quotes what users said, so the early code is still visible though its turn is gone.
    assert cell.answer_visible == 2
    assert after < before
