"""How a stop reaches the command line before and after Concord has loaded: the exception and the exit status.

Shared by the console script (`gateway.cli.entry`, which must import almost nothing) and the commands it loads.
"""

from __future__ import annotations

__all__ = ["EXIT_INTERRUPTED", "StopRequested"]

# What a shell reports for a command stopped by Ctrl-C.
EXIT_INTERRUPTED = 130


class StopRequested(BaseException):
    """SIGINT or SIGTERM reached ``concord run`` before the gateway's own signal handlers were in place."""
