"""The Python lines that open a committed dataset, written from its manifest alone.

The schema of a dataset is never inferred from file contents: a reader names the storage class
and the format. These lines spell out the ones the manifest records, so a user can paste them
instead of guessing (``uint16`` or ``uint32`` tokens, an extra ``doc_index`` field, ...).
``guideloom inspect`` prints them, and so can an ingestion summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from guideloom.manifest import Manifest, PartRecord

__all__ = ["format_expression", "opening_code"]

_VIEWS = {
    "DocumentStorage": "DocumentDataset(storage)",
    "StreamStorage": "StreamDataset(storage, sequence_length=2048)",
    "StreamWithMetaStorage": "StreamWithMetaDataset(storage, sequence_length=2048)",
}
_SHIPPED = {
    "guideloom.formats.document": ("DocumentJsonFormat", "DocumentMsgpackFormat", "DocumentPickleFormat"),
    "guideloom.formats.stream": ("StreamNumpyFormat",),
    "guideloom.formats.annotations": ("StreamWithMetaJsonFormat", "StreamWithMetaMsgpackFormat"),
}


def _stream_format(config: dict[str, Any]) -> str:
    try:
        fields = ", ".join(f'"{name}": np.{np.dtype(dtype).name}' for name, dtype in config["fields"])
    except (TypeError, ValueError, KeyError):  # a damaged config: no code to suggest
        return "StreamNumpyFormat({...})"
    if len(fields) > 300:
        return "StreamNumpyFormat({...})"
    return f"StreamNumpyFormat({{{fields}}})"


def format_expression(recorded: Manifest | PartRecord) -> str:
    """The Python expression that builds the format ``recorded`` (a manifest or part record)
    names, as `opening_code` writes it (shipped formats by their real constructor)."""
    return _format_expr(recorded)[0]


def _format_expr(manifest: Manifest | PartRecord) -> tuple[str, list[str]]:
    """The expression that builds the recorded format, and the import lines it needs."""
    spec = manifest.format
    config = spec.config
    if spec.name in _SHIPPED.get(spec.module, ()):
        if spec.name == "StreamNumpyFormat":
            return _stream_format(config), ["import numpy as np", "from guideloom import StreamNumpyFormat"]
        if set(config) == {"stream"}:  # a shipped stream-with-meta format
            imports = [
                "import numpy as np",
                "from guideloom import StreamNumpyFormat",
                f"from guideloom import {spec.name}",
            ]
            return f"{spec.name}({_stream_format(config['stream'])})", imports
        args = ", ".join(f"{k}={v!r}" for k, v in config.items() if not (k == "protocol" and v == 5))
        return f"{spec.name}({args})", [f"from guideloom import {spec.name}"]
    # A user's format class: import it from where it was defined; its constructor is the user's.
    imports = [f"from {spec.module} import {spec.name}"] if spec.module != "__main__" else []
    if manifest.storage_class == "StreamWithMetaStorage" and set(config) == {"stream"}:
        imports = ["import numpy as np", "from guideloom import StreamNumpyFormat", *imports]
        return f"{spec.name}({_stream_format(config['stream'])})", imports
    # Not its constructor's call (the class is the user's): a note line, then the call to fill in.
    note = (
        f"# {spec.name} is your own format class: construct it as its __init__ takes so that its "
        f"config() is {config!r}\n"
    )
    return f"{note}{spec.name}(...)", imports


_SECRET_WORDS = ("secret", "token", "password", "credential", "sas", "key")


def _options_expr(options: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``storage_options={...}`` as Python, secrets not printed: each becomes a ``...`` to fill
    in, named on a comment line."""
    parts, hidden = [], []
    for key, value in options.items():
        if any(word in key.lower() for word in _SECRET_WORDS) and key.lower() not in ("anon",):
            parts.append(f"{key!r}: ...")
            hidden.append(key)
        else:
            parts.append(f"{key!r}: {value!r}")
    note = [f"# fill in {', '.join(hidden)} (not printed) for the ... below"] if hidden else []
    return f", storage_options={{{', '.join(parts)}}}", note


def opening_code(url: str, manifest: Manifest, *, storage_options: bool | Mapping[str, Any] = False) -> str:
    """Python lines that open the dataset at ``url`` with the storage class and format it records.

    ``url`` is printed as given (pass a redacted one). ``storage_options``: the options the
    dataset was opened with (printed, secrets as ``...`` to fill in), nothing when none were
    needed (empty or False: credentials from the environment, as for the caller), or True for a
    ``storage_options={...}`` placeholder. The view line uses a placeholder ``sequence_length``
    of 2048 tokens for streams: any window size reads the same data. A format class of the
    user's own is written with a note: its constructor is the user's.
    """
    fmt, imports = _format_expr(manifest)
    cls = manifest.storage_class
    view = _VIEWS[cls].split("(", 1)[0]
    names = sorted({cls, view} | {line.split(" import ")[1] for line in imports if "from guideloom " in line})
    lines = [line for line in imports if not line.startswith("from guideloom ")]
    lines.insert(1 if lines[:1] == ["import numpy as np"] else 0, f"from guideloom import {', '.join(names)}")
    note: list[str] = []
    if storage_options is True:
        options = ", storage_options={...}"
    elif isinstance(storage_options, Mapping) and storage_options:
        options, note = _options_expr(storage_options)
    else:
        options = ""
    *fmt_note, fmt = fmt.split("\n")  # a user's class: its note line first
    storage = f"storage = {cls}({url!r}, {fmt}{options})"
    if len(storage) > 76:  # keep the lines readable in an 80-column terminal
        storage = f"fmt = {fmt}\nstorage = {cls}({url!r}, fmt{options})"
    lines += ["", *note, *fmt_note, storage, f"dataset = {_VIEWS[cls]}"]
    return "\n".join(lines)
