"""The compressor's window follows the model that answers (failover, /model) without keeping it across a
restart once its own model is back."""

from __future__ import annotations

from agent.compression.compressor import ContextCompressor


def make() -> ContextCompressor:
    return ContextCompressor(context_length=200_000, max_tokens=8_192, summary_provider=None)


def test_budgets_follow_another_models_window_and_come_back() -> None:
    engine = make()
    home_threshold = engine.threshold_tokens
    engine.use_window(16_000, 4_000)
    assert engine.context_length == 16_000 and engine.max_tokens == 4_000
    assert engine.threshold_tokens < 16_000 - 4_000
    engine.use_window(200_000, 8_192)
    assert (engine.context_length, engine.threshold_tokens) == (200_000, home_threshold)


def test_a_window_learned_from_an_overflow_stays_with_its_model() -> None:
    engine = make()
    engine.lower_context_length(150_000)
    engine.use_window(200_000, 8_192)  # the same model: nothing changes
    assert engine.context_length == 150_000
    assert engine.export_state()["context_length"] == 150_000
    engine.use_window(32_000, None)
    engine.lower_context_length(30_000)
    assert engine.context_length == 30_000


def test_state_saved_while_another_model_answers_keeps_the_engines_own_window() -> None:
    engine = make()
    engine.use_window(16_000, 4_000)
    saved = engine.export_state()
    assert saved["context_length"] == 200_000
    restarted = make()
    restarted.load_state(saved)
    assert restarted.context_length == 200_000, "the main model's window is back after a restart mid-episode"
