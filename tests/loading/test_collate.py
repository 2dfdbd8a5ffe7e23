"""The default collate of streams with metadata: the batch's arrays, not re-stacked rows."""

from __future__ import annotations

import numpy as np
import torch

from guideloom import StreamNumpyFormat, StreamWithMetaDataset, StreamWithMetaStorage
from guideloom.formats.meta import AlignedBatch, StreamWithMetaStorageFormat
from guideloom.loading.collate import collate_aligned

_TOKENS = StreamNumpyFormat({"tokens": np.uint16})


class _Tags(StreamWithMetaStorageFormat):
    def encode_meta(self, annotation):
        return annotation.encode()

    def decode_meta(self, data):
        return bytes(data).decode()


class _OwnAlign(_Tags):
    def align(self, window, spans):
        return {"tokens": window["tokens"], "n": len(spans)}


def _dataset(tmp_path, fmt):
    storage = StreamWithMetaStorage(str(tmp_path / type(fmt).__name__), fmt)
    with storage.writer() as w:
        for i in range(12):
            w.append({"tokens": np.arange(i * 10, i * 10 + 10)}, spans=[(1, 4, f"a{i}"), (6, 9, f"b{i}")])
    return StreamWithMetaDataset(StreamWithMetaStorage(storage.url, fmt), 8)


class _TagsCount:
    @staticmethod
    def of(window: int) -> int:
        spans = [(r * 10 + a, r * 10 + b) for r in range(12) for a, b in ((1, 4), (6, 9))]
        lo, hi = window * 8, window * 8 + 8
        return sum(1 for a, b in spans if a < hi and b > lo)


def test_default_align_collates_like_the_rows_it_stands_for(tmp_path):
    ds = _dataset(tmp_path, _Tags(_TOKENS))
    samples = ds.__getitems__([3, 0, 7, 7, 14])
    assert isinstance(samples, AlignedBatch)
    fast = collate_aligned(samples)
    slow = collate_aligned(list(samples))  # a plain list: the row-by-row path
    assert list(fast) == list(slow) == ["tokens", "spans"]
    assert fast["tokens"].dtype == torch.int32
    torch.testing.assert_close(fast["tokens"], slow["tokens"])
    assert fast["spans"] == slow["spans"]
    assert samples[1]["spans"] == ds[0]["spans"]  # still a list of the samples align builds


def test_an_overridden_align_is_still_called_per_row(tmp_path):
    ds = _dataset(tmp_path, _OwnAlign(_TOKENS))
    samples = ds.__getitems__([0, 1, 2])
    assert not isinstance(samples, AlignedBatch)
    batch = collate_aligned(samples)
    # Window i of 8 tokens over records of 10 tokens with spans at [1, 4) and [6, 9).
    expected = [_TagsCount.of(i) for i in range(3)]
    assert batch["n"].tolist() == expected
    assert batch["tokens"].shape == (3, 8)


def test_the_loader_reads_span_batches_and_slices_groups_into_the_same_batches(tmp_path):
    """With the default align and collate the loader reads a `SpanBatch` per group of batches
    (no dict per row); cut into batches and collated, it is what `__getitems__` gives."""
    from guideloom import StatefulDataLoader
    from guideloom.formats.meta import SpanBatch

    ds = _dataset(tmp_path, _Tags(_TOKENS))
    indexes = [3, 0, 7, 7, 14, 2, 9]
    read = ds.read_aligned(indexes)
    assert isinstance(read, SpanBatch) and len(read) == len(indexes)
    for lo, hi in ((0, 3), (3, 7)):
        part = collate_aligned(read[lo:hi])
        whole = collate_aligned(ds.__getitems__(indexes[lo:hi]))
        torch.testing.assert_close(part["tokens"], whole["tokens"])
        assert part["spans"] == whole["spans"]
    # An AlignedBatch sliced the same way keeps its arrays (a user collate_fn path).
    rows = ds.__getitems__(indexes)[2:5]
    assert isinstance(rows, AlignedBatch) and rows.spans == read.spans[2:5]
    assert [r["spans"] for r in rows] == read.spans[2:5]
    # Through the loader (groups of 1, 1, 2, ... batches): the same batches as one read each.
    grouped = list(StatefulDataLoader.from_storage(ds.storage, sequence_length=8, batch_size=2, shuffle=True))
    single = list(
        StatefulDataLoader.from_storage(
            ds.storage, sequence_length=8, batch_size=2, shuffle=True, read_ahead=0
        )
    )
    assert len(grouped) == len(single) == 8
    for a, b in zip(grouped, single):
        torch.testing.assert_close(a["tokens"], b["tokens"])
        assert a["spans"] == b["spans"]
    # A format whose align is its own still gets its samples through read_aligned.
    own = _dataset(tmp_path, _OwnAlign(_TOKENS))
    assert not isinstance(own.read_aligned([0, 1]), SpanBatch)


class _BatchTags(_Tags):
    calls = 0

    def decode_meta_batch(self, data, starts, stops):
        type(self).calls += 1
        return [bytes(data[a:b]).decode().upper() for a, b in zip(starts, stops)]


def test_decode_meta_batch_decodes_a_whole_read_at_once(tmp_path):
    ds = _dataset(tmp_path, _BatchTags(_TOKENS))
    plain = _dataset(tmp_path / "plain", _Tags(_TOKENS))
    _BatchTags.calls = 0
    got = ds.__getitems__(list(range(15)))
    assert _BatchTags.calls == 1  # one call for the whole batch
    want = plain.__getitems__(list(range(15)))
    assert [[(a, b, t.lower()) for a, b, t in s["spans"]] for s in got] == [s["spans"] for s in want]
    assert any(s["spans"] for s in got) and got[0]["spans"][0][2] == "A0"
