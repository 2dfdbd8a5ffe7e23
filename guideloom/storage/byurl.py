"""Open a committed dataset by its URL alone: ``guideloom.open(url)``.

The manifest records the storage class and the format (class name, module, ``config()``). The
shipped formats are rebuilt from that record; a format of a user's own is rebuilt only when its
name is registered in `FORMATS` (in code, or through an entry point in the group
``guideloom.formats``). A class that a manifest names is never imported on the manifest's word:
a manifest is data, not code, and whoever can write a bucket must not choose what a reader runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guideloom.errors import PluginError
from guideloom.formats import (
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    Format,
    StreamNumpyFormat,
    StreamWithMetaJsonFormat,
    StreamWithMetaMsgpackFormat,
    StreamWithMetaStorageFormat,
)
from guideloom.manifest import Manifest
from guideloom.registry import GROUPS, Registry
from guideloom.storage.base import DocumentStorage, Storage, StreamStorage, StreamWithMetaStorage
from guideloom.storage.checks import read_manifest

__all__ = ["FORMATS", "build_format", "open_url"]

FormatFactory = Callable[[dict[str, Any]], Format] | type[Format]
"""What `FORMATS` holds: a `Format` subclass, or a function from the recorded ``config`` to a format."""

FORMATS: Registry[FormatFactory] = Registry(
    GROUPS["formats"], "format", hint="guideloom.storage.byurl.FORMATS"
)
"""A user's formats by the class name a manifest records (``Format.spec()["name"]``)."""

_STORAGES: dict[str, type[Storage]] = {
    "DocumentStorage": DocumentStorage,
    "StreamStorage": StreamStorage,
    "StreamWithMetaStorage": StreamWithMetaStorage,
}
_SHIPPED: dict[tuple[str, str], type[Format]] = {
    (cls.__module__, cls.__qualname__): cls
    for cls in (
        DocumentJsonFormat,
        DocumentMsgpackFormat,
        DocumentPickleFormat,
        StreamNumpyFormat,
        StreamWithMetaJsonFormat,
        StreamWithMetaMsgpackFormat,
    )
}


def _from_class(cls: type[Format], config: dict[str, Any]) -> Format:
    """A format of class ``cls`` whose ``config()`` is ``config``: by its ``from_config`` if it
    has one, a stream-with-meta class by its stream's fields, else ``cls(**config)``."""
    from_config = getattr(cls, "from_config", None)
    if callable(from_config):
        built: Format = from_config(config)
        return built
    if issubclass(cls, StreamWithMetaStorageFormat) and "stream" in config:
        rest = {k: v for k, v in config.items() if k != "stream"}
        return cls(StreamNumpyFormat.from_config(config["stream"]), **rest)
    return cls(**config)


def build_format(manifest: Manifest) -> Format:
    """The format ``manifest`` records, built from its record: a shipped one, or one registered
    in `FORMATS` under its class name.

    Args:
        manifest: The dataset's manifest (or any record of its storage class and format).

    Returns:
        A format whose ``spec()`` matches the recorded one.

    Raises:
        PluginError: The recorded format is neither shipped nor registered (the message names
            the class the manifest records and the two ways to register it).
    """
    spec = manifest.format
    config = dict(spec.config)
    shipped = _SHIPPED.get((spec.module, spec.name))
    if shipped is not None:
        return _from_class(shipped, config)
    if spec.name not in FORMATS:
        known = ", ".join(FORMATS.names()) or "none"
        short = spec.name.rsplit(".", 1)[-1]  # the class as a name in the user's code
        raise PluginError(
            f"the dataset records the format {spec.module}.{spec.name} (config={config!r}), which is "
            f"neither shipped nor registered (registered formats: {known}); GuideLoom does not "
            "import a class because a manifest names it. Register it before opening: "
            f"guideloom.storage.byurl.FORMATS.register({spec.name!r}, {short}) after importing "
            f"{short}, or an entry point in your package's pyproject.toml: "
            f'[project.entry-points."{FORMATS.group}"] {spec.name} = "{spec.module}:{spec.name}"; '
            f"or open it with its class: {manifest.storage_class}(url, {short}(...))"
        )
    factory = FORMATS.get(spec.name)
    if isinstance(factory, type):
        return _from_class(factory, config)
    return factory(config)


_FOREIGN_SUFFIXES = (".idx", ".bin", ".ds", ".ds.index", ".npy")


def open_url(
    url: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    storage_options: Mapping[str, Any] | None = None,
    *,
    # (typed Any: callers pass their own options through **kwargs)
    format: Any = None,  # noqa: A002 - the name users know from the issue and the docs
    dtype: Any = None,
    eos_id: Any = None,
    label_masks: Any = None,
    **kwargs: Any,
) -> Storage:
    """The storage at ``url`` with the storage class and format its manifest records; or token
    files another project wrote, read in place (`guideloom.storage.foreign.open_foreign`).

    Args:
        url: A committed dataset's root: a local path or any fsspec URL (``s3://...``). Or
            other projects' token files: a file, a glob or a list of them (``format=``).
        storage_options: fsspec options (endpoint, credentials), as for the storage classes.
        format: ``"megatron"``, ``"datatrove"``, ``"nanogpt"``, ``"llmc"`` or ``"olmo"``: open token files
            of that layout in place. Without it, a URL ending in ``.idx``, ``.bin``, ``.ds``, a
            glob or a list opens as such files (layout from suffix and magic).
        dtype: Token dtype for layouts that do not record it (see `open_foreign`).
        eos_id: End-of-text id of the files, for ``boundaries="eos"``.
        label_masks: Per-token loss-mask files, one per token file (OLMo's label masks; see
            `open_foreign`).
        **kwargs: Passed to the storage class (``snapshot=``, ``cache_dir=``, ``cache_bytes=``).

    Returns:
        A `DocumentStorage`, `StreamStorage` or `StreamWithMetaStorage`.

    Raises:
        DatasetNotFoundError: No dataset is committed at ``url``.
        ManifestError: The manifest is unreadable or invalid.
        PluginError: The manifest records a format of a user's own that is not registered.
        StorageAccessError: The storage refused a request or could not be reached.
    """
    text = url if isinstance(url, (str, os.PathLike)) else None
    if (
        format is not None
        or text is None
        or any(c in os.fspath(text) for c in "*?[")
        or os.fspath(text).rstrip("/").endswith(_FOREIGN_SUFFIXES)
    ):
        from guideloom.storage.foreign import open_foreign

        if kwargs:
            raise TypeError(f"{', '.join(kwargs)} do not apply to files read in place (format={format!r})")
        return open_foreign(
            url, format, dtype=dtype, eos_id=eos_id, label_masks=label_masks, storage_options=storage_options
        )
    if dtype is not None or eos_id is not None or label_masks is not None:
        raise TypeError(
            "dtype=, eos_id= and label_masks= are for token files read in place (give format=); a GuideLoom "
            "dataset's manifest records its format"
        )
    options = dict(storage_options) if storage_options else None
    assert text is not None
    _, manifest = read_manifest(text, options)
    storage_cls = _STORAGES[manifest.storage_class]
    return storage_cls(text, build_format(manifest), storage_options=options, **kwargs)
