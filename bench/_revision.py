"""Run one of this checkout's benchmark files against another revision's packages.

    python bench/_revision.py ROOT FILE [ARGS…]

``sys.path[0]`` (this folder) becomes ROOT, so every import FILE makes — ``agent``, ``gateway``, ``bench`` — is
that revision's, while the benchmark code itself is FILE's: both sides of a ``--baseline`` run measure with
the same code.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    sys.path[0] = sys.argv[1]
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
