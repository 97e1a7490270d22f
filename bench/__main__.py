"""Run every benchmark in ``bench/``: each module with a ``main()`` function, in name order.

    python -m bench                 # all of them
    python -m bench tokens store    # only these
    python -m bench --list          # what would run

A failing benchmark is reported and the others still run; the exit status is 1 if any failed.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType

import bench

__all__ = ["discover", "main"]


def _module_names() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.iter_modules(bench.__path__)
        if not info.name.startswith("_") and not info.ispkg
    )


def discover(names: Sequence[str] | None = None) -> tuple[list[tuple[str, Callable[[], object]]], list[str]]:
    """Benchmarks to run as ``(name, main)`` pairs, and error lines for names that cannot be run.

    Modules without a callable ``main`` (helpers such as shared loaders) are skipped silently unless
    asked for by name.
    """
    available = _module_names()
    wanted = list(names) if names else available
    runnable: list[tuple[str, Callable[[], object]]] = []
    errors: list[str] = []
    for name in wanted:
        if name not in available:
            errors.append(f"{name}: no such benchmark module (have: {', '.join(available)})")
            continue
        try:
            module: ModuleType = importlib.import_module(f"bench.{name}")
        except Exception as exc:  # one broken module must not hide the other benchmarks
            errors.append(f"{name}: import failed: {type(exc).__name__}: {exc}")
            continue
        entry = getattr(module, "main", None)
        if callable(entry):
            runnable.append((name, entry))
        elif names:
            errors.append(f"{name}: has no main()")
    return runnable, errors


def _succeeded(result: object) -> bool:
    """None, 0 and True (or any returned report object) mean success; other ints, strings and False not."""
    if result is None or result is True:
        return True
    if result is False:
        return False
    return result == 0 if isinstance(result, int | str) else True


def _run(name: str, entry: Callable[[], object]) -> bool:
    """Run one benchmark's ``main()`` with a clean argv; True when it succeeded."""
    saved = sys.argv
    sys.argv = [f"python -m bench.{name}"]  # its own argument parser must not see our arguments
    started = time.perf_counter()
    try:
        result = entry()
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
    except SystemExit as exc:
        result = exc.code
    except Exception:
        traceback.print_exc()
        result = 1
    finally:
        sys.argv = saved
    ok = _succeeded(result)
    status = "ok" if ok else f"FAILED ({result})"
    print(f"== bench.{name}: {status} in {time.perf_counter() - started:.1f} s", flush=True)
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    """Discover and run the benchmarks; 0 when all of them succeeded."""
    args = list(sys.argv[1:] if argv is None else argv)
    listing = "--list" in args
    runnable, errors = discover([a for a in args if a != "--list"] or None)
    for line in errors:
        print(f"== bench.{line}", file=sys.stderr)
    if listing:
        print("\n".join(name for name, _ in runnable))
        return 1 if errors else 0
    failed = [name for name, entry in runnable if not _run(name, entry)]
    if failed:
        print(f"== failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed or errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
