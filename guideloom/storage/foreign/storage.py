"""Other projects' token files, read in place as a GuideLoom stream: `ForeignStorage`.

A `ForeignStorage` is a read-only `StreamStorage` whose "manifest" is made in memory from the
files' headers and sizes (`guideloom.storage.foreign.layouts`): one shard per token file, in the order
given, one ``tokens`` field of the files' dtype. Its view, `ForeignStreamDataset`, is a
`StreamDataset`: the same windows across documents and files, the same loader (shuffles, exact
and elastic resume, ``boundaries=``, subsets, ``trace``, ``estimate``), the same readers
(positioned reads on local disk, merged concurrent range requests elsewhere).

Two adapters make the files look like GuideLoom shards to that code:

- `ForeignReader` translates the view's requests (offsets that count GuideLoom's 32-byte shard
  header) into byte ranges of the real files: the tokens after the file's own header, and the
  document index column inside the ``.idx`` / ``.ds.index``. Every real file's size is checked
  as for native shards (at open on local disk, by ``Content-Range`` on S3).
- `ForeignStreamDataset.record_starts_batch` searches the document index column in pages
  (`guideloom.storage.indexfiles.IndexFiles`: a page cache bounded in bytes), so the index is
  never downloaded whole, and converts byte pointers (Megatron) to token positions.

The dataset's fingerprint (what a loader state records) is made of the files' sizes and ETags
(or modification times): a file replaced under a saved state is named when it resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import numpy as np
import xxhash

import guideloom.layout as layout
from guideloom._version import __version__
from guideloom.formats import StreamNumpyFormat
from guideloom.io import Location
from guideloom.io.shards import open_shard_reader
from guideloom.manifest import Manifest
from guideloom.manifest.models import FileColumn, FormatSpecModel, ShardTable
from guideloom.storage.base import StreamStorage
from guideloom.storage.foreign.layouts import TokenFile
from guideloom.storage.indexfiles import IndexFiles
from guideloom.storage.windows import StreamDataset

__all__ = ["ForeignReader", "ForeignStorage", "ForeignStreamDataset", "identity_of"]

_H = layout.HEADER_SIZE


class _RawTable:
    """The real files, as a `guideloom.types.FileTable`: row ``i`` is one file, file ``"data"``."""

    def __init__(self, rels: Sequence[str], sizes: Sequence[int], kind: str) -> None:
        self.rels, self.sizes, self.kind = list(rels), list(sizes), kind

    def __len__(self) -> int:
        return len(self.rels)

    def path(self, shard: int, file: str) -> str:
        return self.rels[shard]

    def size(self, shard: int, file: str) -> int:
        return self.sizes[shard]

    def shard_name(self, shard: int) -> str:
        return f"{self.kind} file {self.rels[shard]}"


class ForeignReader:
    """A `guideloom.types.ShardReader` over the real files, for requests a stream view makes of
    its shards' ``data`` (tokens) and ``starts`` (document index) files."""

    def __init__(
        self,
        location: Location,
        files: Sequence[TokenFile],
        kind: str,
        table: ShardTable,
        element: np.dtype | None = None,
    ) -> None:
        rels: list[str] = []
        sizes: list[int] = []
        row: dict[str, int] = {}

        def add(rel: str, size: int) -> int:
            if rel not in row:
                row[rel] = len(rels)
                rels.append(rel)
                sizes.append(size)
            return row[rel]

        # (shard, file) -> (raw row, byte offset of item 0, leading zero items to make up)
        self._map: dict[tuple[int, str], tuple[int, int, int]] = {}
        # shard -> its document starts held in memory (``<u8``), where no file holds them so
        self._memory: dict[int, bytes] = {}
        # shard -> raw row of its loss-mask file (one byte a token)
        self._masks: dict[int, int] = {}
        for s, f in enumerate(files):
            self._map[(s, "data")] = (add(f.rel, f.size), f.offset, 0)
            if f.start_values is not None:
                self._memory[s] = f.start_values
            elif f.starts is not None and f.index_rel is not None:
                lead = 8 if f.starts.lead_zero else 0
                self._map[(s, "starts")] = (add(f.index_rel, f.index_size), f.starts.offset, lead)
            if f.mask_rel is not None:
                self._masks[s] = add(f.mask_rel, f.mask_size)
        # With masks, the view's elements are (token, mask) pairs read from two files.
        self._element = element if self._masks else None
        # Per shard: (raw row, what to add to a token request's offsets), for `read_into`.
        self._data = [(self._map[(s, "data")][0], self._map[(s, "data")][1] - _H) for s in range(len(files))]
        self.raw_table = _RawTable(rels, sizes, kind)
        self.raw = open_shard_reader(location, self.raw_table)
        self._table = table

    @property
    def local(self) -> bool:
        return bool(self.raw.local)

    @property
    def table(self) -> ShardTable:
        return self._table

    def close(self) -> None:
        self.raw.close()

    def _one(self, shard: int, file: str, start: int, stop: int) -> tuple[int, str, int, int, int]:
        raw, base, lead = self._map[(shard, file)]
        a, b = start - _H, stop - _H
        pad = min(max(lead - a, 0), b - a)  # synthesized zero bytes at the front
        return raw, "data", base + max(a - lead, 0), base + b - lead, pad

    def _translate(
        self, requests: Sequence[tuple[int, str, int, int]]
    ) -> tuple[list[tuple[int, str, int, int]], list[int]]:
        out, pads = [], []
        for shard, file, start, stop in requests:
            raw, name, a, b, pad = self._one(shard, file, start, stop)
            out.append((raw, name, a, max(a, b)))
            pads.append(pad)
        return out, pads

    def read(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        if not self._memory and self._element is None:
            return self._read_plain(requests)
        out: list[bytes] = [b""] * len(requests)
        plain: list[int] = []
        masked: list[int] = []
        for i, (shard, file, start, stop) in enumerate(requests):
            if file == "starts" and shard in self._memory:
                out[i] = self._memory[shard][max(start - _H, 0) : max(stop - _H, 0)]
            elif file == "data" and self._element is not None:
                masked.append(i)
            else:
                plain.append(i)
        if plain:
            for i, blob in zip(plain, self._read_plain([requests[i] for i in plain])):
                out[i] = blob
        if masked:
            for i, blob in zip(masked, self._read_masked([requests[i] for i in masked])):
                out[i] = blob
        return out

    def _read_plain(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        raw, pads = self._translate(requests)
        blobs = self.raw.read(raw)
        if any(pads):
            blobs = [bytes(p) + b if p else b for p, b in zip(pads, blobs)]
        return blobs

    def _read_masked(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        """Elements of (token, mask): the tokens from the token file, the masks from the mask
        file, interleaved as the stream format packs them."""
        element = self._element
        assert element is not None
        names = element.names or ()
        token_dtype = element.fields[names[0]][0]  # type: ignore[index]
        isz, tsz = element.itemsize, token_dtype.itemsize
        raw: list[tuple[int, str, int, int]] = []
        spans: list[int] = []
        for shard, _, start, stop in requests:
            if (start - _H) % isz or (stop - _H) % isz:
                raise ValueError(f"a read of bytes [{start}, {stop}) cuts a token of {shard}'s elements")
            e0, e1 = (start - _H) // isz, (stop - _H) // isz
            row, shift = self._data[shard]
            base = shift + _H
            raw.append((row, "data", base + e0 * tsz, base + e1 * tsz))
            raw.append((self._masks[shard], "data", e0, e1))
            spans.append(e1 - e0)
        blobs = self.raw.read(raw)
        out = []
        for k, n in enumerate(spans):
            both = np.empty(n, element)
            both[names[0]] = np.frombuffer(blobs[2 * k], token_dtype)
            both[names[1]] = np.frombuffer(blobs[2 * k + 1], np.uint8)
            out.append(both.tobytes())
        return out

    def read_iter(self, requests: Sequence[tuple[int, str, int, int]]) -> Iterator[bytes]:
        return iter(self.read(requests))

    def read_into(
        self, requests: Sequence[tuple[int, str, int, int]], buffers: Sequence[Sequence[memoryview]]
    ) -> None:
        """Windows' token reads (the hot path): each request moved by its file's shift."""
        if self._memory or self._element is not None:
            for blob, bufs in zip(self.read(requests), buffers):
                view, pos = memoryview(blob), 0
                for buf in bufs:
                    end = pos + buf.nbytes
                    buf[:] = view[pos:end]
                    pos = end
            return
        data = self._data
        raw = [(data[s][0], "data", a + data[s][1], b + data[s][1]) for s, f, a, b in requests if f == "data"]
        if len(raw) != len(requests):  # index bytes too (never made up: `read` makes those)
            translated, pads = self._translate(requests)
            if any(pads):
                raise ValueError("read_into of a document index's leading bytes; use read")
            raw = translated
        self.raw.read_into(raw, buffers)

    def map_file(self, shard: int, file: str) -> memoryview | None:
        """A read-only memory map of the whole real file behind shard ``shard``'s ``file`` (the
        ``.idx`` for ``"starts"``: the column lies at its `IndexColumn` offset), size-checked;
        None off local disk."""
        raw, _, _ = self._map[(shard, file)]
        return self.raw.map_file(raw, "data")

    def __repr__(self) -> str:
        return f"ForeignReader({self.raw!r})"


class ForeignShardTable(ShardTable):
    """The shard table of foreign files: messages and traces name the real files, and traces
    give the tokens' byte ranges in them (after each file's own header, ``token_size`` bytes a
    token: the token file alone, without a mask's byte)."""

    real: list[str] = []
    real_index: list[str] = []
    offsets: list[int] = []
    token_size: int = 0
    units: list[int] = []

    def start_unit(self, i: int) -> int:
        return self.units[i]

    def token_bytes(self, i: int, start: int, stop: int, itemsize: int) -> tuple[int, int]:
        return self.offsets[i] + start * self.token_size, self.offsets[i] + stop * self.token_size

    def path(self, i: int, name: str) -> str:
        return self.real_index[i] if name == "starts" and self.real_index else self.real[i]

    def shard_name(self, i: int) -> str:
        return f"file {i} ({self.real[i]})"


def _table(files: Sequence[TokenFile], itemsize: int, token_size: int) -> ShardTable:
    """The shard table GuideLoom's views read: one shard per token file, sizes as native shards
    would have (header included), checksums made of the files' identities."""
    n = len(files)
    ids = [f"xxh3_64:{xxhash.xxh3_64_hexdigest(f.identity.encode())}" for f in files]
    columns = {
        "data": FileColumn.model_construct(
            kind="tokens", size=[_H + f.tokens * itemsize for f in files], checksum=ids
        )
    }
    has_starts = n > 0 and all(f.starts is not None for f in files)
    if has_starts:
        columns["starts"] = FileColumn.model_construct(
            kind="starts", size=[_H + f.starts.count * 8 for f in files if f.starts], checksum=ids
        )
    records = [f.starts.count if (has_starts and f.starts) else 0 for f in files]
    return ForeignShardTable.model_construct(
        real=[f.rel for f in files],
        real_index=[f.index_rel or f.rel for f in files],
        offsets=[f.offset for f in files],
        token_size=token_size,
        units=[f.starts.scale if f.starts else 1 for f in files],
        part=list(range(n)),
        index=[0] * n,
        records=records,
        tokens=[f.tokens for f in files],
        spans=[0] * n,
        prefix=["foreign"],
        prefix_id=[0] * n,
        files=columns,
        part_base=[],
    )


class ForeignStorage(StreamStorage):
    """Token files of another project (Megatron, datatrove, nanoGPT, llm.c, OLMo), read in place as
    a read-only `StreamStorage` with a ``tokens`` field (and ``loss_mask``, where the files have
    per-token masks). Open one with `guideloom.open` and a
    ``format=`` (or `guideloom.storage.foreign.open_foreign`); give it to `StreamDataset` /
    `StatefulDataLoader.from_storage` as any stream storage."""

    def __init__(
        self,
        location: Location,
        files: Sequence[TokenFile],
        *,
        kind: str,
        dtype: np.dtype,
        eos_id: int | None = None,
        description: str | None = None,
    ) -> None:
        # No Storage.__init__: there is no manifest, snapshot history or committer to read.
        masked = [f.mask_rel is not None for f in files]
        if any(masked) and not all(masked):
            lacking = files[masked.index(False)].rel
            raise ValueError(
                f"{location.describe(lacking)} has no loss mask but other files of the dataset do: "
                "give every token file its mask, or open those with and without masks separately"
            )
        fields: dict[str, Any] = {"tokens": dtype}
        if files and all(masked):
            fields["loss_mask"] = np.uint8
        self._stream_format = StreamNumpyFormat(fields)
        self.format = self._stream_format
        self.block_cache = None
        self.location = location
        self.kind = kind
        self.files = list(files)
        self.eos_id = eos_id
        self._description = description or location.display_url
        self._snapshot = None
        self._pinned = None
        table = _table(self.files, self._stream_format.itemsize, np.dtype(dtype).itemsize)
        metadata: dict[str, Any] = {"foreign": {"format": kind, "files": [f.rel for f in self.files]}}
        if eos_id is not None:  # where boundaries='eos' finds the id when none is given
            metadata["ingest"] = {"tokenizer": {"eos_id": int(eos_id)}}
        self._manifest = Manifest.model_construct(
            version=3,
            storage_class="StreamStorage",
            format=FormatSpecModel(**self.format.spec()),
            num_parts=len(self.files),
            total_records=sum(table.records),
            total_tokens=sum(table.tokens),
            total_spans=0,
            total_bytes=sum(sum(c.size) for c in table.files.values()),
            created_at="",
            guideloom_version=__version__,
            metadata=metadata,
            shard_table=table,
        )

    # view_class (the view open_view and the loader open on it) is set below, after that class

    @property
    def url(self) -> str:
        return self._description

    def __repr__(self) -> str:
        return f"ForeignStorage({self._description!r}, format={self.kind!r}, {self.format!r})"

    @property
    def manifest(self) -> Manifest:
        assert self._manifest is not None
        return self._manifest

    def refresh(self) -> Manifest:
        return self.manifest

    @property
    def current_snapshot(self) -> Any:
        return None

    def exists(self) -> bool:
        return True

    def snapshots(self) -> list[Any]:
        return []

    @property
    def has_starts(self) -> bool:
        """Whether the files have a document index (Megatron, datatrove, Dolma sidecars)."""
        return "starts" in self.manifest.shard_table.files

    def file_identities(self) -> list[tuple[str, str]]:
        """Each real file (tokens, index, mask) with its size and ETag or modification time."""
        out = []
        for f in self.files:
            parts = ["[" + p for p in f.identity[1:].split("[")]
            rels = [f.rel, *([f.index_rel] if f.starts is not None and f.index_rel else [])]
            rels += [f.mask_rel] if f.mask_rel else []
            if len(parts) != len(rels):  # pragma: no cover - every opener builds them so
                raise AssertionError(f"{f.rel}: {len(parts)} identities for {len(rels)} files")
            out += list(zip(rels, parts))
        return out

    def open_reader(self) -> ForeignReader:
        """A reader of the real files, for the view."""
        return ForeignReader(
            self.location, self.files, self.kind, self.manifest.shard_table, self._stream_format.dtype
        )

    def _read_only(self, what: str) -> NoReturn:
        raise TypeError(
            f"{self._description} is a {self.kind} dataset read in place; GuideLoom does not {what} "
            "it. Write a GuideLoom dataset with StreamStorage(url, format).writer() instead"
        )

    def writer(self, *args: Any, **kwargs: Any) -> Any:
        self._read_only("write to")

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        self._read_only("commit")

    def delete(self) -> None:
        self._read_only("delete")

    def at_snapshot(self, snapshot: str | int) -> Any:
        self._read_only("keep snapshots of")

    def verify(self, *args: Any, **kwargs: Any) -> Any:
        self._read_only("verify (it has no checksums)")


class ForeignStreamDataset(StreamDataset):
    """A `StreamDataset` of a `ForeignStorage`: windows of its tokens, and record starts from
    its document index, read in pages."""

    def __init__(self, storage: ForeignStorage, sequence_length: int) -> None:
        super().__init__(storage, sequence_length)
        self.reader = storage.open_reader()  # type: ignore[assignment]
        scale = [f.starts.scale if f.starts else 1 for f in storage.files]
        self._scale = np.asarray(scale, dtype=np.int64)

    @property
    def has_record_starts(self) -> bool:
        return "starts" in self.manifest.shard_table.files

    def _no_starts(self) -> NoReturn:
        storage: ForeignStorage = self.storage  # type: ignore[assignment]
        raise ValueError(
            f"{self.url} ({storage.kind} files) has no document index, so no record starts: use "
            "boundaries='eos' with the end-of-text id (eos_id=50256 for GPT-2's tokenizer), given "
            "to guideloom.open(..., eos_id=) or to from_storage"
        )

    def _start_units(self, shard: np.ndarray) -> np.ndarray | None:
        # Megatron's column holds byte pointers (a token is its item size); the others, tokens.
        return self._scale[shard]  # type: ignore[no-any-return]

    @property
    def _maps_starts(self) -> bool:
        """Whether record starts are searched in memory maps: local files whose index column
        holds the starts themselves (Megatron's pointers; datatrove's ends are searched in pages)."""
        storage: ForeignStorage = self.storage  # type: ignore[assignment]
        return all(
            f.starts is not None and not f.starts.lead_zero and f.start_values is None for f in storage.files
        )

    def _map_starts(self, shard: int) -> np.ndarray:
        storage: ForeignStorage = self.storage  # type: ignore[assignment]
        column = storage.files[shard].starts
        assert column is not None
        if column.count == 0:
            return np.empty(0, "<i8")
        mapped = self.reader.map_file(shard, "starts")  # the whole index file, size-checked
        if mapped is None:
            raise RuntimeError(f"{self.url}: record starts are mapped only from local disk (reader.local)")
        return np.frombuffer(mapped, "<i8", count=column.count, offset=column.offset)

    @property
    def _start_index(self) -> IndexFiles:  # type: ignore[override]
        index = self.__dict__.get("_foreign_index")
        if index is None:
            index = self.__dict__["_foreign_index"] = IndexFiles(self.reader)
            index.paged = True  # local files too: pages through the reader, nothing mapped whole
        return index  # type: ignore[no-any-return]


def identity_of(info: dict[str, Any]) -> str:
    """What identifies one version of a file, from its listing details: size and ETag (object
    stores) or modification time (local disk and others)."""
    tag = info.get("ETag") or info.get("etag") or info.get("md5_checksum") or info.get("generation")
    when: Any = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if hasattr(when, "timestamp"):
        when = when.timestamp()
    return json.dumps([int(info.get("size") or 0), str(tag) if tag else None, None if tag else when])


ForeignStorage.view_class = ForeignStreamDataset
