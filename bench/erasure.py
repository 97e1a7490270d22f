"""What erasing one message costs the store on SQLite, by chat size.

For each size: a chat of N messages (40 random words each, every one naming its platform message), then one of
them erased — the rows found by the message they hold, rewritten, the active set replaced — and the sweep's
rewrite of both full-text indexes that the erasure marked due (FTS5 before SQLite 3.42 keeps a replaced row's
words in its pages until then; from 3.42 nothing is marked). Afterwards the erased word is looked for in the
indexes' pages, which must no longer hold it.

    python -m bench.erasure [--sizes 500,2000,5000]   (--sizes 10000,100000 for the full-text rewrite of a big store)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from gateway.store import Store
from gateway.store.erasure import FTS_SECURE_DELETE, Erasure, RowRewrite

__all__ = ["main"]

SIZES = (500, 2_000, 5_000)  # hygiene keeps fewer than 5,000 messages in view
BATCH = 2_000
PLANTED = "zephyrword7781"


def _message(i: int, rng: random.Random) -> dict[str, Any]:
    words = " ".join(f"w{rng.randrange(20_000)}" for _ in range(40))
    content = f"{words} {PLANTED}" if i == 0 else words
    return {"role": "user", "content": content, "origin": {"message": f"inbound:discord:c1::{i}",
                                                           "author": "discord:42", "name": "Ann", "at": "",
                                                           "span": [0, len(content)]}}


async def _pages_holding(store: Store) -> int:
    holding = 0
    async with store.engine.connect() as conn:
        for table in ("messages_fts_data", "messages_trigram_data"):
            blocks = await conn.execute(text(f"SELECT block FROM {table}"))
            holding += sum(1 for (block,) in blocks if isinstance(block, bytes) and PLANTED.encode() in block)
    return holding


async def _one(size: int, directory: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{directory / f'erasure-{size}.db'}")
    try:
        session = await store.sessions.get_or_create_active("discord", "dm:c1")
        rng = random.Random(size)
        for start in range(0, size, BATCH):
            batch = [_message(i, rng) for i in range(start, min(size, start + BATCH))]
            await store.messages.append(session.id, batch, [50] * len(batch))
        began = time.perf_counter()
        rows = await store.erasure.rows_of([session.id], origins=["inbound:discord:c1::0"])
        await store.erasure.apply(Erasure(rows=[RowRewrite(rows[0].id, {"role": "user", "content": "[gone]"}, 2)]))
        erased = time.perf_counter() - began
        began = time.perf_counter()
        purged = await store.erasure.purge_if_due()
        purge = time.perf_counter() - began
        left = await _pages_holding(store)
        print(f"{size:>8,} messages: erasure {erased * 1000:7.0f} ms (rows found, rewritten, active set replaced); "
              f"full-text rewrite at the sweep {purge:6.2f} s ({'ran' if purged else 'not due'}); "
              f"index pages still holding the word: {left}")
    finally:
        await store.aclose()


async def _run(sizes: list[int]) -> None:
    print(f"SQLite FTS5 secure-delete: {'yes' if FTS_SECURE_DELETE else 'no (pages rewritten by the sweep)'}")
    with tempfile.TemporaryDirectory(prefix="concord-erasure-") as directory:
        for size in sizes:
            await _one(size, Path(directory))


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (``python -m bench.erasure``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="chat sizes, comma-separated")
    args = parser.parse_args(argv)
    asyncio.run(_run([int(s) for s in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
