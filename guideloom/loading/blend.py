"""``guideloom.open``: a dataset, token files read in place, or a Megatron-style weighted list.

Megatron's ``--data-path`` (and NeMo's ``data_prefix``) blends datasets with a flat list
``[w1, prefix1, w2, prefix2, ...]``: a weight before each dataset, weights being shares of
samples (normalized by their sum). `open_data` reads such a list as a `Mixture` of the
datasets, each opened as `guideloom.storage.byurl.open_url` would open it alone (a Megatron
prefix, any other token files, or a GuideLoom dataset); anything else goes to ``open_url``.
Weights may be numbers or numeric strings, as a command line gives them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from guideloom.errors import DatasetNotFoundError
from guideloom.loading.mixture import Mixture
from guideloom.storage.base import Storage
from guideloom.storage.byurl import open_url

__all__ = ["is_weighted_list", "open_data", "url_weight_pairs", "weighted_pairs"]

_SUFFIXES = (".idx", ".bin", ".ds", ".ds.index", ".npy")


def _weight(value: Any) -> float | None:
    """``value`` as a weight, or None when it is not a number (a path that happens to be one is
    not taken for a weight: a weight comes first, then the path)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    try:
        import numpy as np

        if isinstance(value, (np.integer, np.floating)):
            return float(value)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return None


def is_weighted_list(items: Any) -> bool:
    """Whether ``items`` is a Megatron-style weighted list ``[w1, prefix1, w2, prefix2, ...]``:
    a list of even length (at least 2) whose first item is a number.

    Args:
        items: What a user passed as the data (a URL, a list, ...).

    Returns:
        True for a weighted list (checked item by item by `weighted_pairs`).
    """
    if isinstance(items, (str, bytes, os.PathLike)) or not isinstance(items, Sequence):
        return False
    return len(items) >= 2 and _weight(items[0]) is not None


def weighted_pairs(items: Sequence[Any]) -> list[tuple[str, float]]:
    """The ``(prefix, weight)`` pairs of a weighted list ``[w1, prefix1, w2, prefix2, ...]``.

    Args:
        items: The list.

    Returns:
        One pair per dataset, in the list's order.

    Raises:
        ValueError: An odd length, a weight that is not a positive number, or a dataset that is
            not a path or URL (the message names the place in the list).
    """
    if len(items) % 2:
        raise ValueError(
            f"a weighted list alternates weights and datasets ([w1, prefix1, w2, prefix2, ...]), but "
            f"it has {len(items)} items: give a weight before every dataset"
        )
    pairs = []
    for k in range(0, len(items), 2):
        weight, path = _weight(items[k]), items[k + 1]
        if weight is None or not weight > 0 or weight == float("inf"):
            raise ValueError(
                f"item {k} of the weighted list is {items[k]!r}, not a positive weight: the list "
                "alternates weights and datasets ([w1, prefix1, w2, prefix2, ...])"
            )
        if not isinstance(path, (str, os.PathLike)) or _weight(path) is not None:
            raise ValueError(
                f"item {k + 1} of the weighted list is {path!r}, not a dataset path or URL: the list "
                "alternates weights and datasets ([w1, prefix1, w2, prefix2, ...])"
            )
        pairs.append((os.fspath(path), weight))
    return pairs


def url_weight_pairs(args: Sequence[str]) -> list[tuple[str, float]]:
    """The ``(url, weight)`` pairs of command-line sources written ``URL=WEIGHT``.

    The weight follows the last ``=`` (a URL may hold ``=`` itself, as in a query string).

    Args:
        args: The sources as typed, one ``URL=WEIGHT`` each.

    Returns:
        One pair per source, in the order given.

    Raises:
        ValueError: An item without ``=`` or without a URL, or a weight that is not a positive,
            finite number (the message names the item).
    """
    pairs = []
    for arg in args:
        url, sep, raw = arg.rpartition("=")
        if not sep or not url:
            raise ValueError(
                f"{arg!r} is not URL=WEIGHT (a mixture names each source's weight, e.g. {arg}=0.5)"
            )
        weight = _weight(raw.strip())
        if weight is None or not weight > 0 or weight == float("inf"):
            raise ValueError(f"{url}: weight {raw!r} is not a positive, finite number")
        pairs.append((url, weight))
    return pairs


def open_data(
    url: Any,
    storage_options: Mapping[str, Any] | None = None,
    *,
    format: Any = None,  # noqa: A002 - the name users know from the issue and the docs
    dtype: Any = None,
    eos_id: Any = None,
    label_masks: Any = None,
    **kwargs: Any,
) -> Any:
    """The dataset at ``url`` (see `guideloom.storage.byurl.open_url`), or, for a Megatron-style
    weighted list ``[w1, prefix1, w2, prefix2, ...]``, a `Mixture` of the datasets it names.

    Args:
        url: A committed dataset's root, token files (a file, a Megatron prefix, a glob or a list),
            or a weighted list: a weight (a number or a numeric string, a share of samples)
            before each dataset.
        storage_options: fsspec options (endpoint, credentials), for every dataset.
        format: The token files' layout (``"megatron"``, ...; see `open_url`); in a weighted
            list, every dataset's. A weighted list's bare prefixes are Megatron's by default.
        dtype: Token dtype for layouts that do not record it.
        eos_id: End-of-text id of the files, for ``boundaries="eos"``.
        label_masks: Per-token loss-mask files (not for a weighted list).
        **kwargs: Passed to the storage class (``snapshot=``, ``cache_dir=``, ...).

    Returns:
        A storage (`StreamStorage`, ...), or a `Mixture` for a weighted list.

    Raises:
        ValueError: A malformed weighted list (the message names the item).
        DatasetNotFoundError: No dataset at a URL (see `open_url`).
        MixtureError: The weighted list's datasets cannot be mixed (layouts or fields differ).
    """
    if not is_weighted_list(url):
        return open_url(
            url, storage_options, format=format, dtype=dtype, eos_id=eos_id, label_masks=label_masks, **kwargs
        )
    if label_masks is not None:
        raise TypeError(
            "label_masks= is for one dataset of token files, not a weighted list: mix opened storages"
        )
    sources: list[tuple[Storage, float]] = []
    for path, weight in weighted_pairs(url):
        opened = _open_member(path, storage_options, format, dtype, eos_id, kwargs)
        sources.append((opened, weight))
    return Mixture(sources)


def _open_member(
    path: str,
    options: Mapping[str, Any] | None,
    format: Any,  # noqa: A002
    dtype: Any,
    eos_id: Any,
    kwargs: dict[str, Any],
) -> Storage:
    """One dataset of a weighted list: a bare prefix is a Megatron pair (``PREFIX.bin`` and
    ``PREFIX.idx``), as in Megatron's own lists; anything else as `open_url` opens it."""
    if format is None and not any(c in path for c in "*?[") and not path.endswith(_SUFFIXES):
        try:
            return open_url(path, options, **kwargs)
        except DatasetNotFoundError:
            format = "megatron"  # noqa: A001 - no manifest there: a Megatron prefix
    return open_url(path, options, format=format, dtype=dtype, eos_id=eos_id, **kwargs)
