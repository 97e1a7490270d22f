"""Named crash points, for the tests and the reliability campaign that kill a worker inside a window too small to
hit from outside.

``CONCORD_FAULT_KILL_AT=<point>[,<point>…]`` in a worker's environment makes it SIGKILL itself the first time it
reaches each named point — no cleanup, exactly as a crash or the OOM killer would leave it. The variable is read
once, when this module is imported; never set in production, each point then costs one set lookup. A point
fires once per process: a worker restarted with the variable still set dies at the next occurrence.

The points:

* ``inbox-kept`` — a received batch is in the inbox (or, with the database down, in the spool), not handed on;
* ``request-stored`` — a compaction inside a turn stored the turn's messages (its request first), the turn not
  finished;
* ``command-applied`` — a command that changes something ran, its reply and handled mark not stored;
* ``answer-stored`` — an answer is stored with its handled mark, not sent;
* ``observed-queued`` — an observed group line was taken, its batch not written;
* ``ahead-summarized`` — a compaction ahead of need has its summary, its result not stored.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["ENV", "POINTS", "crash_point", "parse_points"]

ENV = "CONCORD_FAULT_KILL_AT"
POINTS = frozenset({"inbox-kept", "request-stored", "command-applied", "answer-stored", "observed-queued",
                    "ahead-summarized"})


def parse_points(value: str) -> set[str]:
    """The crash points ``value`` (comma-separated) names; unknown names are said on stderr and ignored."""
    names = {name.strip() for name in value.split(",") if name.strip()}
    for unknown in sorted(names - POINTS):
        print(f"{ENV}: unknown crash point {unknown!r} ignored (have: {', '.join(sorted(POINTS))})", file=sys.stderr)
    return names & POINTS


_ARMED = parse_points(os.environ.get(ENV, ""))


def crash_point(name: str) -> None:
    """SIGKILL this process here if ``name`` is armed (the first time only)."""
    if name not in _ARMED:
        return
    _ARMED.discard(name)
    # Written straight to the file descriptor: a logging handler's buffer dies with the process.
    os.write(2, f"crash point {name}: SIGKILL\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)
