"""The dataset views as the loader sees them: `open_view`, the `DatasetView` protocol, and batches
planned in Python ints (small) or with whole-array operations (large) giving the same samples."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from storage_helpers import ConceptsFormat, expected_spans

from guideloom import (
    DocumentDataset,
    DocumentMsgpackFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)
from guideloom.formats.meta import SpanBatch
from guideloom.storage import WindowReader, open_view
from guideloom.types import LAYOUTS, DatasetView

FMT = StreamNumpyFormat({"tokens": np.uint32, "mask": np.uint8})
SEQ = 16


def _records(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out, pos = [], 0
    for _ in range(count):
        n = int(rng.integers(1, 90))
        out.append(np.arange(pos, pos + n, dtype=np.uint32))
        pos += n
    return out


def _stream(url: str, seed: int = 0, count: int = 120) -> StreamStorage:
    storage = StreamStorage(url, FMT)
    with storage.writer(shard_size=700) as w:  # many shards: windows cross shard boundaries
        for tokens in _records(seed, count):
            w.append({"tokens": tokens, "mask": (tokens % 3 == 0).astype(np.uint8)})
    return StreamStorage(url, FMT)


def _documents(url: str) -> DocumentStorage:
    storage = DocumentStorage(url, DocumentMsgpackFormat())
    with storage.writer(shard_size=400) as w:
        for i in range(700):
            w.append([i, "d" * (i % 11)])
    return DocumentStorage(url, DocumentMsgpackFormat())


def _meta(url: str) -> tuple[StreamWithMetaStorage, list[Any]]:
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    rng = np.random.default_rng(3)
    records = []
    for r in range(150):
        n = int(rng.integers(2, 60))
        spans = [(a, a + 1, [f"{r}.{a}"]) for a in range(0, n - 1, int(rng.integers(1, 5)))]
        records.append((np.full(n, r, dtype=np.uint16), spans))
    storage = StreamWithMetaStorage(url, fmt)
    with storage.writer(shard_size=900) as w:
        for tokens, spans in records:
            w.append({"tokens": tokens}, spans=spans)
    return StreamWithMetaStorage(url, fmt), records


@pytest.fixture(params=["local", "memory"])
def where(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return str(tmp_path) if request.param == "local" else f"memory://{tmp_path.name}"


def test_open_view_picks_the_layouts_view_and_checks_the_window_length(where: str) -> None:
    stream, documents = _stream(f"{where}/s"), _documents(f"{where}/d")
    meta, _ = _meta(f"{where}/m")
    views = [open_view(documents), open_view(stream, 8), open_view(meta, sequence_length=8)]
    assert [type(v) for v in views] == [DocumentDataset, StreamDataset, StreamWithMetaDataset]
    assert [v.layout for v in views] == list(LAYOUTS)
    assert views[1].sequence_length == 8 and views[0].sequence_length is None
    with pytest.raises(ValueError, match="sequence_length=8 has no meaning for the document dataset"):
        open_view(documents, 8)
    with pytest.raises(ValueError, match="sequence_length is required for the stream dataset"):
        open_view(stream)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="sequence_length must be a positive integer"):
            open_view(meta, bad)  # type: ignore[arg-type]
    total = stream.manifest.total_tokens
    with pytest.raises(ValueError, match=f"larger than the whole stream at .*{total} tokens"):
        open_view(stream, total + 1)
    assert len(open_view(stream, total)) == 1
    with pytest.raises(TypeError, match="open_view takes a GuideLoom storage"):
        open_view("not a storage")  # type: ignore[arg-type]


def test_every_view_is_a_dataset_view(where: str) -> None:
    stream, documents = _stream(f"{where}/s"), _documents(f"{where}/d")
    meta, _ = _meta(f"{where}/m")
    for view in (open_view(documents), open_view(stream, SEQ), open_view(meta, SEQ)):
        assert isinstance(view, DatasetView)
        assert view.url == view.storage.url
        assert view.fingerprint == str(view.manifest.fingerprint)
        # what the loader sizes read-ahead with: a window's bytes, or a document's on average
        if view.sequence_length is None:
            expected = view.manifest.total_bytes // len(view)
        else:
            expected = view.sequence_length * view.stream_format.itemsize
        assert view.sample_bytes == expected
    docs = open_view(documents)
    assert (
        docs.read_batch([3, 1, -1])
        == docs.__getitems__([3, 1, -1])
        == [[3, "ddd"], [1, "d"], [699, "d" * (699 % 11)]]
    )
    windows = open_view(stream, SEQ)
    batch = windows.read_batch([5, 0, 5])
    assert set(batch) == {"tokens", "mask"} and batch["tokens"].shape == (3, SEQ)
    np.testing.assert_array_equal(batch["tokens"], windows.read_windows([5, 0, 5])["tokens"])
    spans = open_view(meta, SEQ).read_batch([2, 7])
    assert isinstance(spans, SpanBatch) and len(spans) == 2


def test_the_single_field_split_is_a_view_of_the_read_bytes(tmp_path: Any) -> None:
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    storage = StreamStorage(tmp_path / "one", fmt)
    with storage.writer() as w:
        w.append({"tokens": np.arange(100, dtype=np.uint16)})
    elements = StreamDataset(StreamStorage(tmp_path / "one", fmt), 10)._windows.read([3, 4])
    split = fmt.split_fields(elements)["tokens"]
    assert split.base is not None and np.shares_memory(split, elements)  # no copy
    assert split.dtype == np.uint16 and split[1].tolist() == list(range(40, 50))
    both = FMT.split_fields(np.zeros(4, FMT.dtype))
    assert all(a.flags.c_contiguous for a in both.values())
    assert not hasattr(fmt, "from_bytes")


def _batches(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = [list(range(n)), list(range(n - 1, -1, -1)), list(range(0, n, 3)), [0, 0, 1, 1, n - 1, -1, -n]]
    out += [rng.integers(-n, n, size).tolist() for size in (1, 7, 40, 150, 300)]
    out += [np.sort(rng.integers(0, n, 300)).tolist(), rng.permutation(n)[:260].tolist()]
    return out


def test_small_and_large_plans_read_the_same_samples(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch read both ways (every batch planned in Python ints, then every batch with
    arrays), against the stream concatenated by hand and the records."""
    stream = _stream(f"{where}/s", seed=1, count=200)
    tokens = np.concatenate(_records(1, 200))
    documents = _documents(f"{where}/d")
    meta, records = _meta(f"{where}/m")
    windows, docs, spans = (
        StreamDataset(stream, SEQ),
        DocumentDataset(documents),
        StreamWithMetaDataset(meta, SEQ),
    )
    assert len(stream.manifest.shards) > 10 and len(documents.manifest.shards) > 10
    for small in (10**9, 0):
        for cls in (StreamDataset, StreamWithMetaDataset, DocumentDataset):
            monkeypatch.setattr(cls, "small_batch", small)
        for batch in _batches(len(windows), 2):
            w = windows.read_windows(batch)
            expected = np.stack(
                [tokens[(i % len(windows)) * SEQ : (i % len(windows) + 1) * SEQ] for i in batch]
            )
            np.testing.assert_array_equal(w["tokens"], expected)
            np.testing.assert_array_equal(w["mask"], (expected % 3 == 0).astype(np.uint8))
        for batch in _batches(len(docs), 3):
            d = docs.__getitems__(batch)
            assert d == [[i % 700, "d" * ((i % 700) % 11)] for i in batch]
        for batch in _batches(len(spans), 4):
            s = spans.read_aligned(batch)
            assert s.spans == [expected_spans(records, SEQ, i % len(spans)) for i in batch]


def test_a_window_reader_over_several_views_reads_each_views_windows(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import guideloom.storage.windowplan as windows_module  # (WindowReader lives in windowplan.py)

    views = [
        StreamDataset(_stream(str(tmp_path / f"s{k}"), seed=k, count=60 + 40 * k), SEQ) for k in range(3)
    ]
    reader = WindowReader(views)
    rng = np.random.default_rng(5)
    for limit in (10**9, 0):  # planned in Python ints, then with arrays
        monkeypatch.setattr(windows_module, "_SMALL_MIXED", limit)
        for size in (1, 9, 200):
            src = rng.integers(0, 3, size)
            local = np.array([rng.integers(0, len(views[v])) for v in src.tolist()], dtype=np.int64)
            half = np.lexsort((local[: size // 2], src[: size // 2]))  # some back-to-back runs
            src[: size // 2], local[: size // 2] = src[: size // 2][half], local[: size // 2][half]
            out = reader.read(local, src)
            for row, (v, w) in enumerate(zip(src.tolist(), local.tolist())):
                np.testing.assert_array_equal(out[row]["tokens"], views[v].read_windows([w])["tokens"][0])
