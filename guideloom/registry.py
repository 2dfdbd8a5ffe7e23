"""Named plug-ins: one small registry per extension point, filled by code or by entry points.

GuideLoom's extension points that are chosen *by name* (a tokenizer spec such as ``hf:...``, an
input kind such as ``jsonl``, a format recorded in a manifest) each have one `Registry`. The
layouts are not plug-ins: there are three (`guideloom.types.LAYOUTS`), fixed by the storage
classes, each with its shard encoder (`guideloom.storage.encoders.ENCODERS`). Built-in names are registered by the module that defines them; a user's
package adds names without any change to GuideLoom, either by calling `Registry.register` or
through an entry point in its ``pyproject.toml``::

    [project.entry-points."guideloom.tokenizers"]
    sentencepiece = "my_package.tokenizers:SentencePieceTokenizer"

Entry points are read once, the first time a name is not found among those registered, and an
entry point is imported only when its own name is asked for. A name that is still unknown is a
`guideloom.errors.PluginError` that lists the names known and says how to add one.

The groups (`GROUPS`) are the public contract; `guideloom.types` describes what each kind of
plug-in must provide.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Generic, TypeVar

from guideloom.errors import PluginError

__all__ = ["GROUPS", "Registry"]

T = TypeVar("T")

GROUPS = {
    "tokenizers": "guideloom.tokenizers",
    "input_readers": "guideloom.input_readers",
    "formats": "guideloom.formats",
}


class Registry(Generic[T]):
    """Objects of one kind by name: ``register(name, obj)``, ``get(name)``, ``names()``.

    ``group`` is the entry-point group searched for names not registered in code; ``what`` is
    how messages call one entry (``"tokenizer"``, ``"input reader"``, ...).
    """

    def __init__(self, group: str, what: str, *, hint: str = "") -> None:
        self.group = group
        self.what = what
        self.hint = hint
        self._items: dict[str, T] = {}
        self._entry_points: dict[str, metadata.EntryPoint] | None = None
        self._lock = threading.Lock()

    def register(self, name: str, obj: T, *, replace: bool = False) -> T:
        """Add ``obj`` under ``name`` and return it (usable as a decorator through `registering`).

        Raises:
            PluginError: ``name`` is empty, or already registered and ``replace`` is False.
        """
        if not isinstance(name, str) or not name:
            raise PluginError(f"a {self.what} name must be a non-empty string, got {name!r}")
        with self._lock:
            if name in self._items and not replace and self._items[name] is not obj:
                raise PluginError(
                    f"a {self.what} named {name!r} is already registered "
                    f"({_describe(self._items[name])}); pass replace=True to replace it"
                )
            self._items[name] = obj
        return obj

    def registering(self, name: str) -> Callable[[T], T]:
        """``@registry.registering("name")`` above a class or function registers it."""

        def decorate(obj: T) -> T:
            return self.register(name, obj)

        return decorate

    def get(self, name: str) -> T:
        """The object registered as ``name``, loading an entry point of that name if needed.

        Raises:
            PluginError: Nothing is registered or installed under ``name`` (the message lists
                the known names and how to add one), or its entry point fails to import.
        """
        found = self._items.get(name)
        if found is not None:
            return found
        entry = self._installed().get(name)
        if entry is None:
            known = ", ".join(sorted(self.names())) or "none"
            raise PluginError(
                f"unknown {self.what} {name!r}; known: {known}. Register one with "
                f"{self.hint or 'the registry'}.register({name!r}, ...) or an entry point in the "
                f"group {self.group!r} of an installed package"
            )
        try:
            obj = entry.load()
        except Exception as err:
            raise PluginError(
                f"the {self.what} {name!r} comes from the entry point {entry.value!r} "
                f"(group {self.group!r}), which failed to import: {type(err).__name__}: {err}"
            ) from err
        return self.register(name, obj, replace=True)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._items or name in self._installed())

    def names(self) -> list[str]:
        """Every known name: registered in code, or installed as an entry point."""
        return sorted({*self._items, *self._installed()})

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _installed(self) -> dict[str, metadata.EntryPoint]:
        if self._entry_points is None:
            found = {ep.name: ep for ep in metadata.entry_points(group=self.group)}
            self._entry_points = found
        return self._entry_points


def _describe(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module else str(name)
