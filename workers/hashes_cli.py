"""``guideloom index-hashes URL``: build the exact-duplicate hash index of a dataset without one.

A dataset ingested with ``--dedup exact`` carries its index; one ingested without it (or by an
older GuideLoom, or whose index was damaged) gets one here, so that ``ingest --append --dedup
exact`` can drop the documents it already holds. The dataset stores tokens, not text, so each
document's tokens (without the end-of-document and beginning-of-sequence tokens ingestion added)
are decoded with the tokenizer the manifest records and the decoded text is hashed. Documents,
streams and streams with metadata are read (a stream's documents end at its end-of-document
tokens). For a
byte-level tokenizer (``bytes``, GPT-2/Llama-style byte-level BPE, tiktoken) decoding gives back
the text exactly; a tokenizer that normalises text (lowercasing, Unicode forms) gives back the
normalised text, so use ``--normalize`` with such a tokenizer.

The index is written beside the snapshot (`guideloom.storage.hashindex.write_side_record`):
nothing committed changes. It runs in this one process (documents are read view batch by view
batch; the hashes, 16 bytes per document, are held until written).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import typer

from guideloom.errors import GuideLoomError, HashIndexError
from guideloom.manifest.hashindex import BUCKETS, HashIndex, bucket_of, hash_texts
from guideloom.storage.hashindex import index_of, write_piece, write_side_record
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META

__all__ = ["build_hash_index", "index_hashes"]

_BATCH = 256  # documents read at once
_WINDOW = 1 << 16  # stream tokens read at once


def _documents(storage: Any, eos: int | None) -> Any:
    """Each document's token ids (a list of arrays per batch), in stream order."""
    import guideloom

    if storage.layout == DOCUMENTS:
        view = guideloom.DocumentDataset(storage)
        for start in range(0, len(view), _BATCH):
            rows = view.__getitems__(list(range(start, min(len(view), start + _BATCH))))
            yield [np.asarray(r["tokens"]) for r in rows]
        return
    if storage.layout not in (STREAM, STREAM_WITH_META):
        raise HashIndexError(
            f"{storage.url} is a {type(storage).__name__}: index-hashes reads documents and streams; "
            "re-ingest it with --dedup exact to give it an index"
        )
    if eos is None:
        raise HashIndexError(
            f"{storage.url} was ingested without end-of-document tokens (--no-eos), so its "
            "documents cannot be told apart: re-ingest it with --dedup exact to give it an index"
        )
    total = storage.manifest.total_tokens
    # A stream with metadata holds the same token stream (its spans are not needed here).
    reader: Any = (
        guideloom.StreamWithMetaDataset if storage.layout == STREAM_WITH_META else guideloom.StreamDataset
    )
    windows = reader(storage, _WINDOW) if total >= _WINDOW else None
    tail = reader(storage, 1)
    carry = np.empty(0, np.int64)

    def chunks() -> Any:
        n = len(windows) if windows is not None else 0
        for start in range(0, n, 16):
            rows = windows.__getitems__(list(range(start, min(n, start + 16))))  # type: ignore[union-attr]
            yield np.concatenate([np.asarray(r["tokens"]) for r in rows])
        rest = list(range(n * _WINDOW, total))
        if rest:
            yield np.concatenate([np.asarray(r["tokens"]) for r in tail.__getitems__(rest)])

    for chunk in chunks():
        ids = np.concatenate([carry, chunk.astype(np.int64)])
        ends = np.flatnonzero(ids == eos) + 1
        if len(ends):
            yield np.split(ids[: ends[-1]], ends[:-1])
            carry = ids[ends[-1] :]
        else:
            carry = ids
    if len(carry):
        yield [carry]


def build_hash_index(
    url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    normalize: bool = False,
    rebuild: bool = False,
    tokenizer: str | None = None,
) -> HashIndex:
    """Build (or, with ``rebuild``, replace) the hash index of a dataset's current snapshot.

    Args:
        url: The dataset.
        storage_options: fsspec options of the dataset (and an ``hf:`` tokenizer file).
        normalize: Hash normalised texts (as ``--dedup-normalize`` compares them).
        rebuild: Build it even when the snapshot has an index (replacing a damaged one).
        tokenizer: The tokenizer spec that decodes its tokens; default: the recorded one.

    Returns:
        The snapshot's index (the one it had, unless it was built).

    Raises:
        HashIndexError: The dataset records no tokenizer (and none is given), or its documents
            cannot be told apart.
    """
    import guideloom
    from guideloom.workers.tokenizer import load_tokenizer

    storage = guideloom.open(url, storage_options)
    snap = storage.current_snapshot
    if not rebuild:
        try:
            have = index_of(storage.location, snap)
        except HashIndexError:
            have = None
        if have is not None and have.normalize == normalize:
            return have
    meta = (storage.manifest.metadata or {}).get("ingest") or {}
    described = meta.get("tokenizer") or {}
    options = meta.get("options") or {}
    spec = tokenizer or described.get("spec")
    if not spec:
        raise HashIndexError(
            f"{storage.url} records no ingestion tokenizer (it was not written by guideloom "
            f"ingest): name the one that made its tokens, e.g. `guideloom index-hashes {url} "
            "--tokenizer bytes`"
        )
    tok = load_tokenizer(spec, storage_options=storage_options or {})
    eos = described.get("eos_id", tok.eos_id) if options.get("append_eos", True) else None
    bos = described.get("bos_id") if options.get("bos") else None
    found: list[np.ndarray] = [np.empty(0, "S16")]
    for docs in _documents(storage, eos):
        texts = []
        for ids in docs:
            if eos is not None and len(ids) and ids[-1] == eos:
                ids = ids[:-1]
            if bos is not None and len(ids) and ids[0] == bos:
                ids = ids[1:]
            texts.append(tok.decode([int(i) for i in ids]))
        found.append(hash_texts(texts, normalize))
    hashes = np.unique(np.concatenate(found))
    buckets = bucket_of(hashes)
    pieces = [
        write_piece(storage.location, b, hashes[buckets == b]) for b in range(BUCKETS) if (buckets == b).any()
    ]
    index = HashIndex(normalize=normalize, documents=len(hashes), pieces=tuple(pieces))
    write_side_record(storage.location, snap, index)
    return index


def index_hashes(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),  # noqa: B008  (typer declares options as defaults)
    storage_options: str | None = typer.Option(  # noqa: B008  (typer declares options as defaults)
        None, metavar="JSON", help="fsspec options of the dataset (JSON), as ingest takes them."
    ),
    normalize: bool = typer.Option(  # noqa: B008  (typer declares options as defaults)
        False, "--normalize", help="Hash normalised text (for --dedup-normalize)."
    ),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build it even if the snapshot has one."),  # noqa: B008  (typer declares options as defaults)
    tokenizer: str | None = typer.Option(None, metavar="SPEC", help="Decode with this tokenizer."),  # noqa: B008  (typer declares options as defaults)
) -> None:
    """Build the exact-duplicate hash index of a dataset's current snapshot, for
    `ingest --append --dedup exact`. Nothing committed changes.

    Exits 0, or 2 when the dataset cannot be read or indexed.
    """
    try:
        options = json.loads(storage_options) if storage_options else None
        index = build_hash_index(url, options, normalize=normalize, rebuild=rebuild, tokenizer=tokenizer)
    except (GuideLoomError, ValueError) as err:  # bad JSON is a ValueError too
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"{url}: hash index of {index.documents:,} distinct documents in {len(index.pieces)} pieces "
        f"({'normalised text' if index.normalize else 'text as stored'})"
    )
