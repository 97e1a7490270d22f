"""The spool: messages the database could not take, fsync'd to a per-worker file and moved into the
inbox later — by their worker, or, once it is gone, by any worker sharing the data directory."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from gateway.intake.spool import Spool


class _Inbox:
    def __init__(self, fail: int = 0) -> None:
        self.kept: list[tuple[list[str], bool]] = []
        self.fail = fail

    async def keep(self, lines: list[str], ours: bool) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionRefusedError("database down")
        self.kept.append((lines, ours))


async def test_spooled_lines_are_moved_once_the_inbox_takes_them(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "w1#a")
    await spool.append(['{"n": 1}', '{"n": 2}'])
    await spool.append(['{"n": 3}'])
    inbox = _Inbox(fail=1)
    with pytest.raises(ConnectionRefusedError):
        await spool.drain(inbox.keep)  # still down: nothing is lost
    assert await spool.drain(inbox.keep) == 3
    assert inbox.kept == [(['{"n": 1}', '{"n": 2}', '{"n": 3}'], True)]
    assert spool.path.read_bytes() == b"" and spool.pending == 0
    assert await spool.drain(inbox.keep) == 0  # nothing twice
    spool.close()


async def test_a_live_workers_spool_is_left_alone_and_a_dead_ones_is_drained(tmp_path: Path) -> None:
    alive, other = Spool(tmp_path, "w1#a"), Spool(tmp_path, "w2#b")
    await alive.append(['{"n": 1}'])
    inbox = _Inbox()
    assert await other.drain(inbox.keep) == 0  # w1 holds its lock
    # A worker process that dies (SIGKILL) drops its lock with it.
    script = ("import asyncio, os, signal, sys; from pathlib import Path; from gateway.intake.spool import Spool\n"
              "s = Spool(Path(sys.argv[1]), 'w3#c'); asyncio.run(s.append(['{\"n\": 9}', '{\"n\": 10}']))\n"
              "os.kill(os.getpid(), signal.SIGKILL)")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(tmp_path))
    await asyncio.wait_for(process.wait(), 60)
    assert (tmp_path / "w3#c.jsonl").exists()
    assert await other.drain(inbox.keep) == 2
    assert inbox.kept == [(['{"n": 9}', '{"n": 10}'], False)]
    assert not (tmp_path / "w3#c.jsonl").exists()
    alive.close()  # a clean stop lets go too: what it held is drained by the next worker to look
    assert await other.drain(inbox.keep) == 1
    assert inbox.kept[-1] == (['{"n": 1}'], False)


async def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "dead#x.jsonl").write_bytes(b'{"n": 1}\n{"n": 2')
    inbox = _Inbox()
    assert await Spool(tmp_path, "w1#a").drain(inbox.keep) == 1
    assert inbox.kept == [(['{"n": 1}'], False)]
    assert "cut short" in caplog.text
