"""What tokens cost (`gateway.policy.pricing`): priced only when input and output prices are set, cache reads and
writes at their own prices (or the input's)."""

from __future__ import annotations

import pytest

from gateway.config import PricingSettings
from gateway.policy.pricing import dollars, tokens_cost


def test_without_prices_nothing_is_priced() -> None:
    assert tokens_cost(PricingSettings(), prompt=1_000, completion=10) is None
    assert tokens_cost(PricingSettings(input=3.0), prompt=1_000, completion=10) is None
    assert not PricingSettings(output=15.0).configured


def test_cache_reads_and_writes_cost_their_own_prices_or_the_inputs() -> None:
    anthropic = PricingSettings(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75)
    # 1M prompt tokens of which 600K read from the cache and 100K written to it; 100K out.
    assert tokens_cost(anthropic, prompt=1_000_000, completion=100_000, cache_read=600_000,
                       cache_write=100_000) == pytest.approx(0.9 + 0.18 + 0.375 + 1.5)
    flat = PricingSettings(input=3.0, output=15.0)
    assert tokens_cost(flat, prompt=1_000_000, completion=0, cache_read=600_000) == pytest.approx(3.0)


def test_dollars_keep_a_summary_calls_fraction_of_a_cent() -> None:
    assert (dollars(0.0225), dollars(0.00004), dollars(1.5), dollars(1234.567)) == (
        "$0.0225", "$0.0000", "$1.50", "$1,234.57")
