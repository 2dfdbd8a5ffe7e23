"""What every format shares: a small, JSON-serialisable spec that the manifest stores.

A format turns one record into bytes and back. It never sees files or URLs. Its *spec* (class
name plus configuration) is written into the manifest, and reopening a dataset compares the spec
of the format the user passes with the recorded one, so data is never read through a format it
was not written with.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Format", "FormatSpec"]

FormatSpec = dict[str, Any]
"""``{"name": "StreamNumpyFormat", "module": "guideloom.formats.stream", "config": {...}}``."""


class Format:
    """Base of every format. Subclasses with parameters override `config`."""

    def config(self) -> dict[str, Any]:
        """The parameters that change the bytes, as JSON values. Stored in the manifest.

        Returns:
            A JSON-able dict; `{}` for a format without parameters. Reopening a dataset compares
            it with the recorded one.
        """
        return {}

    def spec(self) -> FormatSpec:
        """What the manifest records about this format: class name, module and `config()`.

        Returns:
            `{"name": class name, "module": module, "config": config()}`. Two specs name the
            same format when name and config agree (the module is informative only).
        """
        cls = type(self)
        return {"name": cls.__qualname__, "module": cls.__module__, "config": self.config()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Format):
            return NotImplemented
        return same_spec(self.spec(), other.spec())

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, repr(self.config())))

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__qualname__}({cfg})"


def same_spec(a: FormatSpec, b: FormatSpec) -> bool:
    """Two specs describe the same bytes when class name and configuration agree.

    The module is informative only: a format class defined in a training script (``__main__``)
    and the same class imported from a package name the same format.
    """
    return a.get("name") == b.get("name") and _jsonish(a.get("config")) == _jsonish(b.get("config"))


def _jsonish(value: Any) -> Any:
    # Tuples and lists compare equal after a JSON round trip; normalise before comparing.
    if isinstance(value, dict):
        return {str(k): _jsonish(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonish(v) for v in value]
    return value
