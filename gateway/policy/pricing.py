"""What tokens cost, as ``pricing.*`` says (US dollars per million tokens), for /usage and /stats."""

from __future__ import annotations

from gateway.config import PricingSettings

__all__ = ["dollars", "tokens_cost"]

_PER = 1_000_000


def tokens_cost(prices: PricingSettings, *, prompt: int, completion: int, cache_read: int = 0,
                cache_write: int = 0) -> float | None:
    """The cost of ``prompt`` tokens (cache reads and writes included, as providers report them) and
    ``completion`` tokens; None when no prices are configured."""
    if prices.input is None or prices.output is None:
        return None
    read = prices.input if prices.cache_read is None else prices.cache_read
    write = prices.input if prices.cache_write is None else prices.cache_write
    fresh = max(0, prompt - cache_read - cache_write)
    return (fresh * prices.input + cache_read * read + cache_write * write + completion * prices.output) / _PER


def dollars(amount: float) -> str:
    """``$12.34``, or four decimals below a dollar (``$0.0042``): a summary call's cost is a fraction of a cent."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"
