"""The house's layout holds: gateway rooms import one way, no import circle, small modules (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "gateway", "adapters", "bench")
# Bottom to top: a gateway module may import its own room and the rooms below it. `gateway.runtime` sits above
# the rooms whose parts it holds; a room below it names `Runtime` in type annotations only.
ROOM_ORDER = ("config", "store", "ops", "delivery", "intake", "policy", "runtime", "conversation", "router", "app",
              "cli", "__main__")
MAX_MODULE_LINES = 450
MAX_GATEWAY_ENTRIES = 13


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, *, top_level_only: bool) -> set[str]:
    """Project modules ``name`` imports at run time (``if TYPE_CHECKING:`` blocks left out)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt], top: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                if top or not top_level_only:
                    targets = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                               else [f"{node.module}.{alias.name}" for alias in node.names] + [node.module or ""])
                    found.update(_project_module(t) for t in targets)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, False)
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list) and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    visit([c for c in children if isinstance(c, ast.stmt | ast.excepthandler)], top)  # type: ignore[misc]

    visit(ast.parse(path.read_text()).body, True)
    found.discard("")
    found.discard(name)
    return found


def _project_module(dotted: str) -> str:
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gateway"


def test_gateway_rooms_import_one_way() -> None:
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith("gateway."):
            continue
        here = ROOM_ORDER.index(_room(name))
        for target in _imports(name, path, top_level_only=False):
            if target.startswith("gateway.") and ROOM_ORDER.index(_room(target)) > here:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the rooms' order (docs/architecture.md):\n" + "\n".join(sorted(wrong))


def test_no_import_circle() -> None:
    graph = {name: _imports(name, path, top_level_only=False) for name, path in MODULES.items()}
    # Packages import their modules and are imported through them; a circle through one is no circle of modules.
    graph = {name: {t for t in targets if MODULES[t].name != "__init__.py"}
             for name, targets in graph.items()}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def walk(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                walk(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small(package: str) -> None:
    large = {str(path.relative_to(ROOT)): n for name, path in MODULES.items() if name.split(".")[0] == package
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not large, f"modules over {MAX_MODULE_LINES} lines: {large}"


def test_gateway_top_level_stays_short() -> None:
    entries = sorted(p.name for p in (ROOT / "gateway").iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_GATEWAY_ENTRIES, entries
