"""Views are asked only what `guideloom.types` declares (the seam test, beside the import test).

`tests/test_import_graph.py` keeps the layers clean; this keeps the view seam named. It fails on:

* ``getattr(x, ...)`` or ``hasattr(x, ...)`` where ``x`` is a view or storage by name (``view``,
  ``views[i]``, ``self.view``, ``dataset``, ``storage``, ...), anywhere in ``guideloom/`` and
  ``workers/``: ask the protocol (`DatasetView`, `StreamView`, `MixtureView`, `GroupReader`) for
  the member instead, and add the member there (and to every implementation) if it is missing;
* ``isinstance(x, C)`` with ``C`` a concrete view class (a subclass of
  `guideloom.storage.view.View`, `guideloom.storage.wrapped.WrappedView` or the mixture's view)
  outside the module that defines ``C``: use a protocol of `guideloom.types`, or a method of
  ``C``'s own module (as `WindowReader.joining` does);
* a ``__getattr__`` on a view class: a wrapper forwards what `WrappedView` declares, nothing else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import guideloom
from guideloom.loading.mixture_dataset import MixtureDataset
from guideloom.storage.view import View
from guideloom.storage.wrapped import WrappedView

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*sorted((ROOT / "guideloom").rglob("*.py")), *sorted((ROOT / "workers").rglob("*.py"))]
# Names under which code holds a view or the storage behind one.
VIEWISH = {"view", "views", "dataset", "data", "storage", "storages", "inner", "item", "source"}


def _view_classes() -> dict[str, str]:
    """Every concrete view class of the package: name -> file that defines it (relative)."""
    found: dict[str, str] = {}
    for info in pkgutil.walk_packages(guideloom.__path__, "guideloom."):
        if info.name.startswith("guideloom.workers"):
            continue  # imports ray; no views there
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, (View, WrappedView, MixtureDataset)):
                found[cls.__name__] = str(Path(inspect.getfile(cls)).resolve().relative_to(ROOT))
    return found


def _held_name(node: ast.expr) -> str | None:
    """The name an expression holds its object under: ``view``, ``self.view`` -> ``view``,
    ``views[i]`` -> ``views``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _probes(path: Path, view_classes: dict[str, str], rel: str | None = None) -> list[str]:
    rel = rel or str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(), filename=rel)
    found = []
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            func, first = node.func.id, node.args[0]
            if func in ("getattr", "hasattr") and _held_name(first) in VIEWISH:
                found.append(f"{rel}:{node.lineno}: {func}({ast.unparse(first)}, ...)")
            if func == "isinstance" and len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                for kind in kinds:
                    name = _held_name(kind)
                    if name in view_classes and view_classes[name] != rel:
                        found.append(f"{rel}:{node.lineno}: isinstance(..., {name}) outside {view_classes[name]}")
        if isinstance(node, ast.ClassDef) and node.name in view_classes:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__getattr__":
                    found.append(f"{rel}:{item.lineno}: {node.name}.__getattr__ forwards undeclared members")
    return found


def test_the_view_classes_are_found() -> None:
    classes = _view_classes()
    assert {"StreamDataset", "DocumentDataset", "StreamWithMetaDataset", "Subset", "BoundaryView"} <= set(classes)
    assert classes["MixtureDataset"] == "guideloom/loading/mixture_dataset.py"


def test_no_code_probes_a_view() -> None:
    classes = _view_classes()
    probes = [p for path in SOURCES for p in _probes(path, classes)]
    assert not probes, "views are asked only what guideloom/types.py declares:\n" + "\n".join(probes)


def test_the_checker_finds_each_kind_of_probe(tmp_path: Path) -> None:
    """The test above would see a probe: each kind, planted in a file, is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(view, views, self):\n"
        "    a = getattr(view, 'stream_format', None)\n"
        "    b = hasattr(views[0], 'plan')\n"
        "    c = getattr(self.view, 'manifest')\n"
        "    d = isinstance(view, StreamDataset)\n"
        "    e = isinstance(view, (int, Subset))\n"
        "    return getattr(config, 'x', None)\n"  # not a view: allowed
        "class BoundaryView:\n"
        "    def __getattr__(self, name):\n"
        "        return name\n"
    )
    probes = _probes(planted, _view_classes(), rel="guideloom/planted.py")
    assert [p.split(": ", 1)[1] for p in probes] == [
        "getattr(view, ...)",
        "hasattr(views[0], ...)",
        "getattr(self.view, ...)",
        "isinstance(..., StreamDataset) outside guideloom/storage/windows.py",
        "isinstance(..., Subset) outside guideloom/storage/subset.py",
        "BoundaryView.__getattr__ forwards undeclared members",
    ]
