"""Stream sources of a mixture with different fields: per-source defaults (no torch).

A mixture's batches hold one array per field, so every row needs every field. Mixing supervised
data (``tokens`` + ``loss_mask``) with pretraining text (``tokens`` only) works when the source
that lacks a field says what it holds there, in its third item::

    Mixture({"sft": (sft, 0.3), "web": (web, 0.7, {"defaults": {"loss_mask": 1}})})

The mixture's fields are every source's, in order of first appearance; a field two sources
share must have one dtype; a source that lacks a field must give it a default (a number that
the field's dtype holds), and a default for a field the source has is refused (it would be
ignored). Reading fills the default into that source's rows of the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["check_defaults", "merged_fields"]


def check_defaults(name: str, given: Any) -> dict[str, Any]:
    """A source's ``"defaults"`` entry, checked: ``{field: number}``.

    Args:
        name: The source's name (for the message).
        given: What the source's third item holds under ``"defaults"``.

    Returns:
        The defaults as a plain dict.

    Raises:
        ValueError: Not a mapping of field names to numbers.
    """
    if not isinstance(given, Mapping) or not all(
        isinstance(k, str)
        and isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, bool)
        for k, v in given.items()
    ):
        raise ValueError(
            f"source {name!r}: 'defaults' maps a stream field this source lacks to the value its "
            f"rows hold there, e.g. {{'defaults': {{'loss_mask': 1}}}}; got {given!r}"
        )
    return dict(given)


def merged_fields(
    sources: Sequence[tuple[str, str, Mapping[str, Any]]], defaults: Sequence[Mapping[str, Any]]
) -> dict[str, np.dtype]:
    """The mixture's stream fields and dtypes, checked against every source and its defaults.

    Args:
        sources: ``(name, url, {field: dtype})`` per source, in the mixture's order.
        defaults: Each source's ``{field: value}`` defaults (empty: none).

    Returns:
        ``{field: dtype}``: every source's fields, in order of first appearance.

    Raises:
        ValueError: Two sources give one field different dtypes; a source lacks a field and
            gives no default for it (the message shows the default to add); a default for a
            field the source has, or for no field of the mixture; a default the field's dtype
            cannot hold.
    """
    merged: dict[str, np.dtype] = {}
    owner: dict[str, str] = {}
    for name, url, fields in sources:
        for field, dtype in fields.items():
            dt = np.dtype(dtype)
            if field in merged and merged[field] != dt:
                raise ValueError(
                    f"source {name!r} ({url}) stores {field!r} as {dt}, but source "
                    f"{owner[field]!r} stores it as {merged[field]}: batches of one mixture need "
                    "one dtype per field; rewrite one of them with the other's format"
                )
            merged.setdefault(field, dt)
            owner.setdefault(field, name)
    for (name, url, fields), given in zip(sources, defaults):
        for field in given:
            if field in fields:
                raise ValueError(
                    f"source {name!r} ({url}) has the field {field!r}: its default would never "
                    f"be used; remove {field!r} from its defaults"
                )
            if field not in merged:
                raise ValueError(
                    f"source {name!r}: default for {field!r}, which no source of the mixture "
                    f"has (fields: {list(merged)}); remove it"
                )
            dt, value = merged[field], given[field]
            if np.asarray(value).astype(dt).item() != value:
                raise ValueError(
                    f"source {name!r}: the default {field}={value!r} does not fit the field's "
                    f"dtype {dt}; give a value it holds"
                )
        missing = [f for f in merged if f not in fields and f not in given]
        if missing:
            example = ", ".join(f"{f!r}: {_example(f, merged[f])}" for f in missing)
            raise ValueError(
                f"source {name!r} ({url}) has no field {' or '.join(map(repr, missing))}, which "
                f"source {owner[missing[0]]!r} has: every row of a mixed batch needs every "
                f"field. Give the source what its rows hold there: ({name!r}: (storage, weight, "
                f"{{'defaults': {{{example}}}}})), or mix sources of one format"
            )
    return merged


def _example(field: str, dtype: np.dtype) -> str:
    """A default to suggest: 1 for a loss mask (train on every token of plain text), else 0."""
    del dtype
    return "1" if field == "loss_mask" else "0"
