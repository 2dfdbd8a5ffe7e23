"""The import graph keeps the layers that docs/architecture.md draws: no circles, nothing upward.

Every ``import`` of every module under ``guideloom/`` and ``workers/`` is read from its source
(module level, inside functions and under ``TYPE_CHECKING`` alike: a lazy import is still a
dependency), and checked against the rules of docs/architecture.md ("Layers and what each may
import"):

- a module imports only its own layer or layers below it; siblings of one layer (``formats``,
  ``manifest`` and ``io``; ``loading`` and ``workers``) do not import each other;
- no module imports the package root ``guideloom`` (its public face) except the workers and the
  entry points above the layers (``cli``, ``demo``), which use the public API as a user does;
- no circles between modules;
- torch and torchdata are imported only under ``guideloom/loading`` (and by ``guideloom.testing``,
  a helper for training code), ray only under ``workers/``, the trainers' frameworks (Lightning,
  transformers, accelerate) only under ``guideloom/integrations``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer of each top-level part (lower numbers lie below); a part not listed is an error.
LAYERS = {
    "guideloom._version": 0,
    "guideloom.errors": 0,
    "guideloom.types": 1,
    "guideloom.registry": 2,
    "guideloom.layout": 2,
    "guideloom.formats": 3,
    "guideloom.manifest": 3,
    "guideloom.io": 3,
    "guideloom.storage": 4,
    "guideloom.loading": 5,
    "guideloom.workers": 5,
    "guideloom.testing": 6,
    "guideloom.reporting": 6,
    "guideloom.terminal": 6,
    "guideloom.integrations": 6,  # trainers' callbacks: use the loader, import their framework
    "guideloom.cli": 7,
    "guideloom.demo": 7,
    "guideloom": 8,  # the package face: re-exports, imports anything below
}
MAY_IMPORT_ROOT = {"guideloom.workers", "guideloom.cli", "guideloom.demo", "guideloom.testing"}
HEAVY = {"torch": ("guideloom.loading", "guideloom.testing"), "torchdata": ("guideloom.loading",)}
HEAVY["ray"] = ("guideloom.workers",)
# the trainers' frameworks (they import torch): only their callbacks import them
for _framework in ("lightning", "pytorch_lightning", "transformers", "accelerate"):
    HEAVY[_framework] = ("guideloom.integrations",)


@functools.cache
def _modules() -> dict[str, Path]:
    """Module name -> source file, for guideloom/ and workers/ (installed as guideloom.workers)."""
    out: dict[str, Path] = {}
    for base, package in ((ROOT / "guideloom", "guideloom"), (ROOT / "workers", "guideloom.workers")):
        for path in sorted(base.rglob("*.py")):
            if "workers" in path.relative_to(base).parts[:1] and package == "guideloom":
                continue  # a worktree's guideloom/workers link to ../workers
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from guideloom.io import s3` imports the module guideloom.io.s3 (and the package's
            # __init__ first, which the package itself may do): the submodule is the dependency
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno
            if not any(f"{module}.{alias.name}" in _modules() for alias in node.names):
                yield module, node.lineno


def _part(module: str) -> str | None:
    """The LAYERS key a module belongs to (the longest prefix), or None for third-party code."""
    best = None
    for key in LAYERS:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imports(name, path):
            while target and target not in modules and target.startswith("guideloom"):
                target = target.rpartition(".")[0]  # `from pkg import name`: the module is pkg
            if target in modules and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def test_every_module_belongs_to_a_layer():
    unplaced = [m for m in _modules() if _part(m) is None]
    assert not unplaced, f"modules outside every layer of docs/architecture.md: {unplaced}"


def test_no_module_imports_a_layer_above_it_or_a_sibling():
    bad = []
    for name, edges in _graph().items():
        mine = _part(name)
        assert mine is not None
        for target, line in edges.items():
            theirs = _part(target)
            assert theirs is not None
            if theirs == "guideloom" and target == "guideloom":
                if mine not in MAY_IMPORT_ROOT and mine != "guideloom":
                    bad.append(f"{name}:{line} imports the package root")
                continue
            if theirs == mine:
                continue
            if LAYERS[theirs] >= LAYERS[mine] and mine != "guideloom":
                bad.append(
                    f"{name}:{line} imports {target} ({theirs}, layer {LAYERS[theirs]} >= {LAYERS[mine]})"
                )
    assert not bad, "\n".join(bad)


def test_no_circles():
    graph = _graph()
    # The package root re-exports from everywhere; an import of the root is checked above.
    graph = {m: {t: n for t, n in e.items() if t != "guideloom"} for m, e in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("heavy", sorted(HEAVY))
def test_heavy_packages_are_imported_only_where_the_layers_allow(heavy):
    allowed = HEAVY[heavy]
    bad = []
    for name, path in _modules().items():
        for target, line in _imports(name, path):
            if (target == heavy or target.startswith(heavy + ".")) and not any(
                name == a or name.startswith(a + ".") for a in allowed
            ):
                bad.append(f"{name}:{line} imports {target}")
    assert not bad, "\n".join(sorted(set(bad)))
