"""The ``concord`` console script: for ``concord run``, a stop signal is honoured from the first line on.

Loading Concord takes a second or two. Until ``concord run`` installs its own handlers, a SIGTERM there
(``systemctl stop`` or ``docker compose stop`` right after a start) would kill the process mid-import and a
Ctrl-C would print a traceback. Here both raise `StopRequested`, which ends ``concord run`` quietly with 0, as a
stop at any later point of start-up does. (Not ``KeyboardInterrupt``: one raised inside code that a library
runs through ``exec`` makes CPython exit by SIGINT at the end even when it was caught.) Other commands keep
the default signal handling; a Ctrl-C while they load exits 130 without a traceback.

``python -m gateway`` runs the same (``gateway/__main__.py``).
"""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from gateway.cli.interrupts import EXIT_INTERRUPTED, StopRequested

__all__ = ["main"]

def _stop_requested(signum: int, frame: FrameType | None) -> None:
    raise StopRequested(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``concord`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    running = args[:1] == ["run"]
    if running:
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored by whoever started us (nohup): stays so
                signal.signal(sig, _stop_requested)
    try:
        from gateway.cli.main import main as cli_main

        status = cli_main(args)
    except (KeyboardInterrupt, StopRequested):
        status = 0 if running else EXIT_INTERRUPTED
    if running:
        # Everything was closed on the way out. The interpreter's final garbage collection over Concord's objects
        # would cost half a second of CPU more (seconds on a busy machine) while a service manager waits.
        gc.freeze()
    return status
