"""Datasets other projects wrote, read in place: ``guideloom.open(url, format="megatron")``.

`open_foreign` opens Megatron ``.bin``/``.idx`` pairs, datatrove ``.ds`` files, nanoGPT
``.bin`` files and llm.c shards, local or in any store GuideLoom reads, as a read-only
`ForeignStorage` (a `StreamStorage` of one ``tokens`` field). Opening reads each file's size and
ETag and its first bytes (the header), in two rounds of requests for all files together; the
tokens and the document index are read later, by range, as windows need them. See
``docs/datasets-you-have.md`` (and `guideloom.storage.foreign.convert` /
`guideloom.storage.foreign.export` to write them as a GuideLoom dataset and back).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from guideloom.io import Location
from guideloom.storage.foreign.layouts import (
    FORMATS,
    LLMC_DTYPES,
    LLMC_HEADER_BYTES,
    LLMC_MAGIC,
    MEGATRON_HEADER,
    ForeignFormatError,
    IndexColumn,
    TokenFile,
    llmc_header,
    megatron_header,
    megatron_idx_size,
)
from guideloom.storage.foreign.storage import ForeignStorage, ForeignStreamDataset, identity_of

__all__ = ["FORMATS", "ForeignFormatError", "ForeignStorage", "ForeignStreamDataset", "open_foreign"]

_SUFFIXES = {".idx": "megatron", ".ds": "datatrove"}


def _split(url: str) -> tuple[str, str]:
    """``(directory, name)`` of a file URL or path."""
    head, _, name = url.rstrip("/").rpartition("/")
    if "://" in url and "/" not in url.split("://", 1)[1]:
        raise ValueError(f"{url} names a bucket, not a file: give the token files' URLs")
    return head or ".", name


def _common_root(urls: Sequence[str]) -> str:
    dirs = [_split(u)[0] for u in urls]
    root = dirs[0]
    while any(not (d == root or d.startswith(root + "/")) for d in dirs):
        parent = root.rpartition("/")[0]
        if not parent or parent.endswith(":/"):
            raise ValueError(f"the files {urls[0]} and others are not in one store: open them separately")
        root = parent
    return root


def _with_masks(location: Location, files: Sequence[TokenFile], masks: Sequence[str]) -> list[TokenFile]:
    """``files`` with their loss-mask files (one byte a token), each checked against its tokens."""
    info = _infos(location, masks, [f"the loss mask of {location.describe(f.rel)}" for f in files])
    out = []
    for f, m, i in zip(files, masks, info):
        size = int(i["size"])
        if size != f.tokens:
            raise ForeignFormatError(
                f"{location.describe(m)} has {size} bytes, but {location.describe(f.rel)} holds "
                f"{f.tokens} tokens, and a loss mask has one byte a token: the mask belongs to "
                "other tokens or is truncated; pair each token file with its own mask (same order), "
                "or write the mask again"
            )
        out.append(dataclasses.replace(f, mask_rel=m, mask_size=size, identity=f.identity + identity_of(i)))
    return out


def _strip(name: str, suffixes: Sequence[str]) -> str:
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _expand(
    url: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], options: dict[str, Any] | None
) -> list[str]:
    """The files a URL, a glob or a list names, in order (a glob's matches sorted)."""
    items = [url] if isinstance(url, (str, os.PathLike)) else list(url)
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if "://" not in text:
            text = os.path.abspath(text)
        if any(c in text for c in "*?["):
            root, _ = _split(text.split("*")[0].split("?")[0].split("[")[0] + "x")
            location = Location(root, options)
            protocol = text.split("://", 1)[0] + "://" if "://" in text else ""
            found = sorted(location.fs.glob(text.split("://", 1)[-1]))
            if not found:
                raise FileNotFoundError(
                    f"the glob {text} matches no file: check the pattern and the prefix (list it with "
                    "`fsspec.open_files` or `ls`)"
                )
            out += [protocol + str(f) if protocol else str(f) for f in found]
        else:
            out.append(text)
    if not out:
        raise ValueError("no files given: pass a path, a URL, a glob or a list of them")
    return out


def _detect(name: str, head: bytes | None) -> str:
    """The format of a file from its suffix and, for a ``.bin``, its first bytes."""
    for suffix, kind in _SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    if name.endswith(".ds.index"):
        return "datatrove"
    if head is not None and len(head) >= 4 and int(np.frombuffer(head[:4], "<i4")[0]) == LLMC_MAGIC:
        return "llmc"
    return "nanogpt"


def open_foreign(
    url: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    format: str | None = None,  # noqa: A002 - the issue's and guideloom.open's name
    *,
    dtype: Any = None,
    eos_id: int | None = None,
    label_masks: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ForeignStorage:
    """Token files of another project, opened in place as one read-only stream.

    Args:
        url: A file (``data/train.bin``, ``s3://b/mega/text_document.idx``), a Megatron prefix
            (``.../text_document``: its ``.bin`` and ``.idx``), a glob, or a list of them; many
            files are one stream, in the order given (a glob's matches sorted by name).
        format: ``"megatron"``, ``"datatrove"``, ``"nanogpt"``, ``"llmc"`` or ``"olmo"``; None: from the
            suffix (``.idx`` megatron, ``.ds`` datatrove) or, for a ``.bin``, a Megatron ``.idx``
            beside it (megatron), the llm.c magic (llmc), else nanogpt.
        dtype: The token dtype where the files do not record it (nanoGPT: default uint16;
            datatrove: default from the file and index sizes; OLMo: required, as in OLMo-core's
            configuration); Megatron and llm.c record theirs.
        eos_id: The end-of-text id, for ``boundaries="eos"`` (nanoGPT and llm.c files have no
            document index; OLMo arrays without a ``.csv.gz`` sidecar).
        label_masks: Per-token loss masks in files of their own, one per token file in the same
            order (a URL, a glob or a list; OLMo-core's ``label_mask_paths``): one byte a token,
            read as the stream's ``loss_mask`` field. datatrove's ``NAME.ds.loss`` files are
            found beside their ``.ds`` without it.
        storage_options: fsspec options (endpoint, credentials).

    Returns:
        A `ForeignStorage`: give it to `StreamDataset` or `StatefulDataLoader.from_storage`.

    Raises:
        ForeignFormatError: A file is not of the layout, is truncated, or disagrees with its
            index (the message names the file and the fix).
        FileNotFoundError: A file, its index or a glob's match is missing.
    """
    if format is not None and format not in FORMATS:
        raise ValueError(
            f"format={format!r} is not one GuideLoom reads in place; pick one of {', '.join(FORMATS)}"
        )
    options = dict(storage_options) if storage_options else None
    urls = _expand(url, options)
    mask_urls = _expand(label_masks, options) if label_masks is not None else []
    if mask_urls and len(mask_urls) != len(urls):
        raise ValueError(
            f"label_masks names {len(mask_urls)} files for {len(urls)} token files: give one mask "
            "file per token file, in the same order (OLMo-core's label_mask_paths beside its paths)"
        )
    root = _common_root(urls + mask_urls)
    location = Location(root, options)
    cut = len(root) + 1
    names = [u[cut:] for u in urls]
    kinds = {_kind_of(location, n, format) for n in names}
    if len(kinds) != 1:
        raise ValueError(
            f"the files mix layouts ({', '.join(sorted(kinds))}): open each layout on its own, or "
            "mix them with guideloom.Mixture"
        )
    kind = kinds.pop()
    if kind == "olmo" and dtype is None:
        raise ValueError(
            f"{location.describe(names[0])}: OLMo / Dolma token arrays do not record their dtype; "
            "pass the one of the training configuration: guideloom.open(url, format='olmo', "
            "dtype=np.uint32) (OLMo-core picks the smallest unsigned type the vocabulary fits: uint16 "
            "up to 65,536 ids, else uint32)"
        )
    opener = {
        "megatron": _megatron,
        "datatrove": _datatrove,
        "nanogpt": _nanogpt,
        "llmc": _llmc,
        "olmo": _olmo,
    }[kind]
    files, file_dtype = opener(location, names, np.dtype(dtype) if dtype is not None else None)
    masks = [u[cut:] for u in mask_urls]
    if not masks and kind == "datatrove":
        masks = [f.rel + ".loss" for f in files if location.exists(f.rel + ".loss")]
        if masks and len(masks) != len(files):
            have = {m[: -len(".loss")] for m in masks}
            lacking = next(f.rel for f in files if f.rel not in have)
            raise ForeignFormatError(
                f"{location.describe(lacking + '.loss')} is missing, but other .ds files of the dataset have "
                "their .ds.loss mask: copy it beside its .ds, or open the files with and without masks "
                "as two datasets"
            )
    if masks:
        if kind not in ("datatrove", "olmo", "nanogpt"):
            raise ValueError(f"label_masks= is for datatrove, OLMo and nanoGPT files, not {kind} files")
        files = _with_masks(location, files, masks)
    description = urls[0] if len(urls) == 1 else f"{root} ({len(urls)} {kind} files)"
    from guideloom.io.urls import redact_url

    return ForeignStorage(
        location, files, kind=kind, dtype=file_dtype, eos_id=eos_id, description=redact_url(description)
    )


def _kind_of(location: Location, name: str, format: str | None) -> str:  # noqa: A002
    if format is not None:
        return format
    if name.endswith((".idx", ".ds", ".ds.index", ".ds.loss")):
        return _detect(name, None)
    prefix = _strip(name, (".bin",))
    if location.exists(prefix + ".idx"):
        return "megatron"
    if not name.endswith(".bin") and not location.exists(name):
        raise FileNotFoundError(
            f"{location.describe(name)} does not exist (nor {location.describe(prefix + '.idx')})"
        )
    if name.endswith(".npy"):
        return "olmo"
    return _detect(name, location.read(name, 0, 4))


def _infos(location: Location, rels: Sequence[str], what: Sequence[str]) -> list[dict[str, Any]]:
    """Each file's listing details (size, ETag or mtime); a missing one named with its fix."""
    out = []
    for rel, role in zip(rels, what):
        try:
            with location._translated("checking", rel):
                location.fs.invalidate_cache(location.path(rel))
                out.append(dict(location._call("info", location.path(rel))))
        except FileNotFoundError:
            raise ForeignFormatError(
                f"{location.describe(rel)} is missing: {role}. Copy it beside the other files "
                "(same name, other suffix), or open the dataset with the right format="
            ) from None
    return out


def _heads(location: Location, rels: Sequence[str], sizes: Sequence[int], n: int) -> list[bytes]:
    """The first ``n`` bytes of each file, in one round of requests."""
    return location.read_ranges(list(rels), [0] * len(rels), [min(n, s) for s in sizes])


def _megatron(
    location: Location, names: Sequence[str], dtype: np.dtype | None
) -> tuple[list[TokenFile], np.dtype]:
    prefixes = list(dict.fromkeys(_strip(n, (".idx", ".bin")) for n in names))
    idx = [p + ".idx" for p in prefixes]
    bins = [p + ".bin" for p in prefixes]
    info = _infos(
        location,
        [*idx, *bins],
        [f"the index of the Megatron dataset {p}" for p in prefixes]
        + [f"the tokens of the Megatron dataset {p} (its .idx is there)" for p in prefixes],
    )
    idx_sizes = [int(i["size"]) for i in info[: len(prefixes)]]
    bin_sizes = [int(i["size"]) for i in info[len(prefixes) :]]
    heads = _heads(location, idx, idx_sizes, MEGATRON_HEADER.size)
    parsed = [megatron_header(h, location.describe(r)) for h, r in zip(heads, idx)]
    dtypes = {d for d, _, _ in parsed}
    if len(dtypes) != 1:
        raise ForeignFormatError(
            f"the Megatron files hold tokens of different dtypes ({', '.join(sorted(d.name for d in dtypes))}, "
            f"{location.describe(idx[0])} and others): open each dtype as its own dataset and mix them"
        )
    file_dtype = dtypes.pop()
    if dtype is not None and dtype != file_dtype:
        raise ValueError(
            f"dtype={dtype.name} but {location.describe(idx[0])} records {file_dtype.name}: leave dtype out"
        )
    isz = file_dtype.itemsize
    # Second round: the last sequence's length and pointer, the first and last document index.
    rels: list[str] = []
    starts: list[int] = []
    stops: list[int] = []
    for r, (_, n, d), size in zip(idx, parsed, idx_sizes):
        plain, with_modes = megatron_idx_size(n, d)
        if size not in (plain, with_modes):
            raise ForeignFormatError(
                f"{location.describe(r)} has {size} bytes, but its header's {n} sequences and {d} "
                f"documents need {plain} (or {with_modes} with modes): the index is truncated or "
                "damaged; copy it again from its source, or rebuild it with megatron-core"
            )
        if n == 0:
            continue
        h = MEGATRON_HEADER.size
        rels += [r, r, r, r]
        starts += [h + 4 * (n - 1), h + 4 * n + 8 * (n - 1), h + 12 * n, h + 12 * n + 8 * (d - 1)]
        stops += [s + (4 if k == 0 else 8) for k, s in enumerate(starts[-4:])]
    blobs = iter(location.read_ranges(rels, starts, stops) if rels else [])
    files = []
    for r, b, (_, n, _), isize, bsize, ii, bi in zip(
        idx, bins, parsed, idx_sizes, bin_sizes, info[: len(prefixes)], info[len(prefixes) :]
    ):
        where_bin = location.describe(b)
        if n:
            last_len = int(np.frombuffer(next(blobs), "<i4")[0])
            last_ptr = int(np.frombuffer(next(blobs), "<i8")[0])
            first_doc = int(np.frombuffer(next(blobs), "<i8")[0])
            last_doc = int(np.frombuffer(next(blobs), "<i8")[0])
            if first_doc != 0 or last_doc != n:
                raise ForeignFormatError(
                    f"{location.describe(r)}: its document indices run from {first_doc} to {last_doc}, "
                    f"but they must run from 0 to its {n} sequences: the .idx is damaged or from "
                    "another dataset; copy it again, or rebuild it with megatron-core"
                )
            end = last_ptr + last_len * isz
            if end > bsize:
                raise ForeignFormatError(
                    f"{where_bin} has {bsize} bytes, but {location.describe(r)} points to bytes up to "
                    f"{end}: the .bin is truncated, or the pair comes from two datasets; copy the .bin "
                    "again, or pair it with its own .idx"
                )
            if end != bsize:
                raise ForeignFormatError(
                    f"{where_bin} has {bsize} bytes, but {location.describe(r)} accounts for {end}: "
                    "the pair comes from two datasets (sizes disagree); pair each .bin with its own .idx"
                )
        elif bsize:
            raise ForeignFormatError(
                f"{location.describe(r)} lists no sequences but {where_bin} has {bsize} bytes: the pair "
                "comes from two datasets; pair each .bin with its own .idx"
            )
        if bsize % isz:
            raise ForeignFormatError(
                f"{where_bin} has {bsize} bytes, not a whole number of {file_dtype.name} tokens: it is "
                "truncated; copy it again from its source"
            )
        column = IndexColumn(r, MEGATRON_HEADER.size + 4 * n, n, scale=isz)
        files.append(
            TokenFile(
                rel=b,
                size=bsize,
                offset=0,
                tokens=bsize // isz,
                identity=identity_of(bi) + identity_of(ii),
                starts=column,
                index_rel=r,
                index_size=isize,
            )
        )
    return files, file_dtype


def _datatrove(
    location: Location, names: Sequence[str], dtype: np.dtype | None
) -> tuple[list[TokenFile], np.dtype]:
    data = list(dict.fromkeys(_strip(n, (".index", ".loss")) for n in names))
    index = [d + ".index" for d in data]
    info = _infos(
        location,
        [*data, *index],
        [f"the tokens of the datatrove file {d}" for d in data]
        + [
            f"the document index of the datatrove file {d} (datatrove writes NAME.ds.index beside NAME.ds)"
            for d in data
        ],
    )
    sizes = [int(i["size"]) for i in info[: len(data)]]
    index_sizes = [int(i["size"]) for i in info[len(data) :]]
    for rel, s in zip(index, index_sizes):
        if s % 8 or s == 0 and sizes[index.index(rel)]:
            raise ForeignFormatError(
                f"{location.describe(rel)} has {s} bytes, not a whole number of uint64 document ends: "
                "it is truncated; copy it again from its source"
            )
    lasts = location.read_ranges(
        [r for r, s in zip(index, index_sizes) if s],
        [s - 8 for s in index_sizes if s],
        [s for s in index_sizes if s],
    )
    last_end = iter(int(np.frombuffer(b, "<u8")[0]) for b in lasts)
    files = []
    widths = set()
    for d, r, size, isize, di, ii in zip(
        data, index, sizes, index_sizes, info[: len(data)], info[len(data) :]
    ):
        tokens = next(last_end) if isize else 0
        width = dtype.itemsize if dtype is not None else (size // tokens if tokens else 2)
        if tokens * width != size or width not in (2, 4):
            raise ForeignFormatError(
                f"{location.describe(d)} has {size} bytes, but {location.describe(r)} says it holds "
                f"{tokens} tokens (of 2 or 4 bytes, uint16 or uint32): the .ds is truncated, or the "
                "pair comes from two datasets; copy both again from the same tokenization run"
                + (f" (dtype={dtype.name} was given)" if dtype is not None else "")
            )
        widths.add(width)
        column = IndexColumn(r, 0, isize // 8, scale=1, lead_zero=True)
        files.append(TokenFile(d, size, 0, tokens, identity_of(di) + identity_of(ii), column, r, isize))
    if len(widths) > 1:
        raise ForeignFormatError(
            f"the datatrove files under {location.display_url} hold tokens of 2 and 4 bytes: open each "
            "kind as its own dataset"
        )
    file_dtype = (
        dtype if dtype is not None else np.dtype(np.uint16 if widths == {2} or not widths else np.uint32)
    )
    return files, file_dtype


def _nanogpt(
    location: Location, names: Sequence[str], dtype: np.dtype | None
) -> tuple[list[TokenFile], np.dtype]:
    file_dtype = dtype if dtype is not None else np.dtype(np.uint16)
    info = _infos(location, names, ["a nanoGPT token file"] * len(names))
    files = []
    for n, i in zip(names, info):
        size = int(i["size"])
        if size % file_dtype.itemsize:
            raise ForeignFormatError(
                f"{location.describe(n)} has {size} bytes, not a whole number of {file_dtype.name} "
                "tokens: it is truncated, or its tokens are of another dtype (pass dtype=)"
            )
        files.append(TokenFile(n, size, 0, size // file_dtype.itemsize, identity_of(i)))
    return files, file_dtype


def _llmc(
    location: Location, names: Sequence[str], dtype: np.dtype | None
) -> tuple[list[TokenFile], np.dtype]:
    info = _infos(location, names, ["an llm.c token shard"] * len(names))
    sizes = [int(i["size"]) for i in info]
    heads = _heads(location, names, sizes, LLMC_HEADER_BYTES)
    files = []
    file_dtype = dtype
    for n, i, size, head in zip(names, info, sizes, heads):
        version, tokens = llmc_header(head, location.describe(n))
        known = LLMC_DTYPES.get(version)
        this = dtype if dtype is not None else known
        if this is None:
            raise ForeignFormatError(
                f"{location.describe(n)} is an llm.c shard of version {version}, whose token dtype "
                "GuideLoom does not know (version 1 is uint16): pass dtype= (np.uint32, ...)"
            )
        if file_dtype is None:
            file_dtype = this
        expected = LLMC_HEADER_BYTES + tokens * this.itemsize
        if size != expected:
            raise ForeignFormatError(
                f"{location.describe(n)} has {size} bytes, but its header's {tokens} {this.name} tokens "
                f"need {expected}: the shard is truncated; copy it again from its source"
            )
        files.append(TokenFile(n, size, LLMC_HEADER_BYTES, tokens, identity_of(i)))
    return files, file_dtype if file_dtype is not None else np.dtype(np.uint16)


def _sidecar_starts(blob: bytes, where: str, tokens: int, data: str) -> bytes:
    """The document starts of a Dolma ``.csv.gz`` sidecar (rows ``start,end,path,id``), checked
    against the array's ``tokens``, as ``<u8`` bytes."""
    try:
        text = gzip.decompress(blob).decode()
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise ForeignFormatError(
            f"{where} is not a gzipped CSV ({err}): it is damaged; copy it again from the Dolma "
            "tokenizer's output, or remove it and give eos_id= to find documents by their end id"
        ) from None
    bounds: list[tuple[int, int]] = []
    for n, row in enumerate(csv.reader(io.StringIO(text))):
        if not row:
            continue
        try:
            bounds.append((int(row[0]), int(row[1])))
        except (ValueError, IndexError):
            if n == 0:  # a header line
                continue
            raise ForeignFormatError(
                f"{where} row {n + 1} is {row[:2]!r}, not a start and an end token position: the "
                "sidecar is damaged; copy it again, or remove it and give eos_id="
            ) from None
    previous = 0
    for n, (start, end) in enumerate(bounds):
        if not previous <= start <= end or end > tokens:
            raise ForeignFormatError(
                f"{where} row {n + 1} gives the document [{start}, {end}), but {data} holds {tokens} "
                "tokens and documents run in order, each after the one before: the sidecar belongs to "
                "another array (or the array is truncated); pair each .npy with its own .csv.gz"
            )
        previous = end
    return np.asarray([s for s, _ in bounds], dtype="<u8").tobytes()


def _olmo(
    location: Location, names: Sequence[str], dtype: np.dtype | None
) -> tuple[list[TokenFile], np.dtype]:
    assert dtype is not None
    info = _infos(location, names, ["an OLMo / Dolma token array"] * len(names))
    sidecars = [_strip(n, (".npy",)) + ".csv.gz" for n in names]
    present = [location.exists(s) for s in sidecars]
    if any(present) and not all(present):
        lacking = sidecars[present.index(False)]
        raise ForeignFormatError(
            f"{location.describe(lacking)} is missing, but other arrays of the dataset have their "
            ".csv.gz sidecar: copy it beside its .npy, or open the arrays without sidecars as a "
            "dataset of their own"
        )
    side_info = _infos(location, sidecars, ["a Dolma sidecar"] * len(names)) if all(present) else []
    blobs = (
        location.read_ranges(sidecars, [0] * len(names), [int(i["size"]) for i in side_info])
        if side_info
        else []
    )
    files = []
    for k, (n, i) in enumerate(zip(names, info)):
        size = int(i["size"])
        if size % dtype.itemsize:
            raise ForeignFormatError(
                f"{location.describe(n)} has {size} bytes, not a whole number of {dtype.name} "
                f"tokens ({dtype.itemsize} bytes each): the dtype is not the one it was written with "
                "(pass the dtype= of its OLMo configuration, np.uint16 or np.uint32), or it is "
                "truncated"
            )
        tokens = size // dtype.itemsize
        if not side_info:
            files.append(TokenFile(n, size, 0, tokens, identity_of(i)))
            continue
        values = _sidecar_starts(blobs[k], location.describe(sidecars[k]), tokens, location.describe(n))
        column = IndexColumn(sidecars[k], 0, len(values) // 8)
        files.append(
            TokenFile(
                n,
                size,
                0,
                tokens,
                identity_of(i) + identity_of(side_info[k]),
                column,
                sidecars[k],
                len(values),
                start_values=values,
            )
        )
    return files, dtype
