"""Telegram polling traffic through Redis faults: real workers on PostgreSQL and a private Redis.

    python -m bench.redis_campaign [--workers 1,2] [--chats 20] [--rate 10] [--fault-seconds 10]
                                   [--baseline PATH]

``--workers`` real ``concord run`` processes poll a fake Telegram (one holds the polling lease) on a scratch
PostgreSQL database (``CONCORD_BENCH_POSTGRES_URL`` or ``CONCORD_TEST_POSTGRES_URL``) and a private
redis-server without persistence, answering through the instant fake LLM. ``--chats`` private chats send
``--rate`` messages a second in all, without pause, while Redis is in turn

* killed — SIGKILLed and restarted 2 s later, empty (no persistence: tickets, leases, handled ids gone);
* hung — SIGSTOPped for ``--fault-seconds``, then SIGCONTed (what waited in its sockets runs then);
* slow 0.3 s / slow 2 s — blocked by back-to-back ``DEBUG SLEEP 0.3`` (requests slow but answered) or
  ``DEBUG SLEEP 2`` (requests time out on the client, and Redis runs many of them later) for
  ``--fault-seconds``;

with 10 calm seconds before the first fault and after each. Each fault is charged with the messages sent from
its start until the next one starts; for them it prints how many were answered once, twice or never, how many
were turned away ("… messages are already waiting here") or apologised for, and the longest a chat waited
after Redis was back (an answer's time less the later of its question's and Redis's return). The answers
are read from the fake Telegram, and the stored history is checked once at the end (`check_exactly_once`):
nothing the workers report is used. ``--baseline`` runs the same campaign from another checkout too (e.g.
``git worktree add /tmp/base <commit>``), one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from bench.cluster import REPO, Cluster, Sent, check_exactly_once
from bench.scratch_db import scratch_postgres
from gateway.conversation.answers import FAILURE_TEXT
from gateway.intake.waiting import QUEUE_FULL
from gateway.store import upgrade_database
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram, SentMessage
from tests.faults.services import free_port
from tests.locks.conftest import PrivateRedis

__all__ = ["Campaign", "FaultFigures", "main", "run_campaign"]

CALM_S = 10.0
LATE_S = 5.0  # the bound: no chat waits longer than this after Redis is back
TURNED_AWAY = QUEUE_FULL.split("{waiting}")[1].strip()[:30]
APOLOGY = FAILURE_TEXT[:40]


@dataclass
class Campaign:
    """What to run: workers, traffic and how long each fault lasts."""

    workers: int = 1
    chats: int = 20
    rate: float = 10.0
    fault_s: float = 10.0
    calm_s: float = CALM_S
    repo: Path = REPO


@dataclass
class FaultFigures:
    """What the messages charged to one fault became."""

    fault: str
    sent: int = 0
    answered: int = 0
    twice: int = 0
    never: int = 0
    turned_away: int = 0
    apologies: int = 0
    late: int = 0
    longest_wait_s: float = 0.0

    def line(self) -> str:
        return (f"{self.fault:<11} sent {self.sent:>4}  answered once {self.answered:>4}  twice {self.twice:>3}  "
                f"never {self.never:>4}  turned away {self.turned_away:>4}  apologies {self.apologies:>3}  "
                f"waited > {LATE_S:.0f} s after Redis was back {self.late:>4} (longest {self.longest_wait_s:5.1f} s)")


@dataclass
class _Timed:
    sent: Sent
    at: float
    fault: str


@dataclass
class _Run:
    telegram: FakeTelegram
    cluster: Cluster
    messages: list[_Timed] = field(default_factory=list)
    back: dict[str, float] = field(default_factory=dict)  # fault → when Redis was back
    fault: str = "calm"


class _Sleeper:
    """Back-to-back ``DEBUG SLEEP`` in a thread: Redis busy for ``seconds`` at a time with tiny gaps."""

    def __init__(self, port: int, seconds: float) -> None:
        self._client = SyncRedis(port=port, socket_timeout=seconds + 30)
        self._seconds = seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(RedisError):
                self._client.execute_command("DEBUG", "SLEEP", str(self._seconds))

    def __enter__(self) -> _Sleeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


def _faults(redis: PrivateRedis, seconds: float) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    async def killed() -> None:
        redis.kill()
        await asyncio.sleep(2.0)
        redis.start()

    async def hung() -> None:
        redis.pause()
        try:
            await asyncio.sleep(seconds)
        finally:
            redis.resume()

    def slowed(by: float) -> Callable[[], Awaitable[None]]:
        async def slow() -> None:
            with _Sleeper(redis.port, by):
                await asyncio.sleep(seconds)

        return slow

    return [("killed", killed), ("hung", hung), ("slow 0.3 s", slowed(0.3)), ("slow 2 s", slowed(2.0))]


async def _traffic(run: _Run, campaign: Campaign, stop: asyncio.Event) -> None:
    chats = [run.cluster.new_chat() for _ in range(campaign.chats)]
    n = 0
    started = time.monotonic()
    while not stop.is_set():
        chat = chats[n % len(chats)]
        text = f"c{chat} m{n}"
        message = run.telegram.inject_message(text, chat_type="private", chat_id=chat, user_id=chat)
        run.messages.append(_Timed(Sent(chat, message["message_id"], text), time.monotonic(), run.fault))
        n += 1
        await asyncio.sleep(max(0.0, started + n / campaign.rate - time.monotonic()))


def _figures(run: _Run, names: list[str]) -> list[FaultFigures]:
    replies: dict[int, list[SentMessage]] = {}
    for reply in run.telegram.sent_messages:
        if reply.reply_to_message_id is not None:
            replies.setdefault(reply.reply_to_message_id, []).append(reply)
    table = {name: FaultFigures(name) for name in names}
    for timed in run.messages:
        figures = table[timed.fault]
        figures.sent += 1
        got = replies.get(timed.sent.message_id, [])
        answers = [r for r in got if r.text.startswith("re: ")]
        figures.turned_away += any(TURNED_AWAY in r.text for r in got)
        figures.apologies += any(r.text.startswith(APOLOGY) for r in got)
        if not answers:
            figures.never += 1
            continue
        figures.answered += len(answers) == 1
        figures.twice += len(answers) > 1
        back = run.back.get(timed.fault)
        if back is not None:
            wait = answers[0].at - max(timed.at, back)
            figures.longest_wait_s = max(figures.longest_wait_s, wait)
            figures.late += wait > LATE_S
    return [table[name] for name in names]


async def run_campaign(campaign: Campaign, postgres_url: str, workdir: Path) -> tuple[list[FaultFigures], list[str]]:
    """Run the campaign once; figures per fault, and the problems `check_exactly_once` found in the end."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found")
    redis = PrivateRedis(binary=binary, port=free_port(), workdir=workdir)
    redis.start()
    telegram, llm = FakeTelegram(), FakeLLMServer()
    await telegram.start()
    await llm.start()
    llm.responder = lambda body: Reply(f"re: {body['messages'][-1]['content']}")
    try:
        async with scratch_postgres(postgres_url, "concord_redis_campaign") as database:
            await upgrade_database(database)
            cluster = Cluster(campaign.workers, database, redis.url, telegram, llm.openai_base_url,
                              workdir / "cluster", env={"CONCORD_TELEGRAM__MODE": "polling"}, repo=campaign.repo)
            await cluster.start()
            try:
                run = _Run(telegram, cluster)
                faults = _faults(redis, campaign.fault_s)
                stop = asyncio.Event()
                traffic = asyncio.create_task(_traffic(run, campaign, stop))
                await asyncio.sleep(campaign.calm_s)
                for name, fault in faults:
                    run.fault = name
                    await fault()
                    run.back[name] = time.monotonic()
                    await asyncio.sleep(campaign.calm_s)
                stop.set()
                await traffic
                await _drain(run)
                names = ["calm", *(name for name, _ in faults)]
                problems = await check_exactly_once([t.sent for t in run.messages], telegram.sent_messages, database)
                return _figures(run, names), problems
            finally:
                await cluster.aclose()
    finally:
        await llm.stop()
        await telegram.stop()
        if redis.process is not None:
            redis.resume()
        redis.kill()


async def _drain(run: _Run, quiet_s: float = 15.0, limit_s: float = 120.0) -> None:
    """Wait until every message has an answer, or nothing new was sent for ``quiet_s`` (at most ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    wanted = {t.sent.message_id for t in run.messages}
    seen = len(run.telegram.sent_messages)
    last_change = time.monotonic()
    while time.monotonic() < deadline:
        answered = {r.reply_to_message_id for r in run.telegram.sent_messages if r.text.startswith("re: ")}
        if wanted <= answered:
            return
        if len(run.telegram.sent_messages) != seen:
            seen, last_change = len(run.telegram.sent_messages), time.monotonic()
        elif time.monotonic() - last_change > quiet_s:
            return
        await asyncio.sleep(0.2)


def _postgres() -> str:
    url = os.environ.get("CONCORD_BENCH_POSTGRES_URL") or os.environ.get("CONCORD_TEST_POSTGRES_URL")
    if not url:
        raise SystemExit("bench.redis_campaign: set CONCORD_BENCH_POSTGRES_URL or CONCORD_TEST_POSTGRES_URL")
    return url


async def _main(args: argparse.Namespace, repos: list[tuple[str, Path]]) -> None:
    for workers in (int(w) for w in args.workers.split(",")):
        for label, repo in repos:
            campaign = Campaign(workers, args.chats, args.rate, args.fault_seconds, repo=repo)
            with tempfile.TemporaryDirectory(prefix="concord-redis-campaign-") as name:
                figures, problems = await run_campaign(campaign, _postgres(), Path(name))
            print(f"\n{label} ({repo}), {workers} worker(s), {args.chats} chats at {args.rate:g} messages/s, "
                  f"faults of {args.fault_seconds:g} s:")
            for row in figures:
                print("  " + row.line())
            print(f"  stored history: {'every message once, in order' if not problems else '; '.join(problems[:5])}"
                  + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""))


def main(argv: list[str] | None = None) -> None:
    """Run the campaign and print one table per worker count (and per checkout with ``--baseline``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.redis_campaign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated (default 1,2)")
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--rate", type=float, default=10.0, help="messages per second in all")
    parser.add_argument("--fault-seconds", type=float, default=10.0)
    parser.add_argument("--baseline", help="another checkout to run the same campaign from")
    args = parser.parse_args(argv)
    repos = [("this checkout", REPO)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    asyncio.run(_main(args, repos))


if __name__ == "__main__":
    main()
