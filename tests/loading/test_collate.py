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
