"""A packed view's own API (what the loader and `guideloom.trace` read of it): indexing,
records_of, record_starts_batch, base_indexes and pieces agree with the tokens it returns;
and its settings errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guideloom import StreamNumpyFormat, StreamStorage
from guideloom.loading.packing import PackedView, Packing, pack_view
from guideloom.storage import open_view

FMT = StreamNumpyFormat({"tokens": np.uint32})
LENGTH = 8
LENGTHS = [3, 4, 5, 6, 7, 2, 1, 8, 3, 5]


def _write(root: Path, lengths: list[int], fmt: StreamNumpyFormat = FMT) -> StreamStorage:
    """Records of ``lengths`` tokens whose ids count up from 1 along the stream (0 is padding)."""
    storage = StreamStorage(str(root), fmt)
    at = 1
    with storage.writer(shard_size=40) as w:
        for n in lengths:
            w.append({name: np.arange(at, at + n, dtype=np.uint32) for name in fmt.fields})
            at += n
    return StreamStorage(str(root), fmt)


@pytest.fixture
def packed(tmp_path: Path) -> PackedView:
    storage = _write(tmp_path / "s", LENGTHS)
    assert storage.manifest.num_shards > 2
    return pack_view(open_view(storage, LENGTH), "whole", seed=0, shuffle=False)


def test_every_record_is_in_one_window_and_read_there(packed: PackedView) -> None:
    n = len(packed)
    assert n == packed.stats.windows and packed.stats.records == len(LENGTHS)
    starts = np.cumsum([0, *LENGTHS[:-1]]).tolist()
    seen = sorted(pair for w in range(n) for pair in packed.records_of(w))
    assert seen == list(zip(starts, LENGTHS))
    for w in range(n):
        tokens = packed[w]["tokens"].tolist()
        at = 0
        for a, m in packed.records_of(w):  # stream position a holds token id a + 1
            assert tokens[at : at + m] == list(range(a + 1, a + m + 1))
            at += m
        assert tokens[at:] == [0] * (LENGTH - at)


def test_negative_and_batched_indexes_read_the_same_windows(packed: PackedView) -> None:
    n = len(packed)
    last, first = packed[-1], packed[0]
    assert np.array_equal(last["tokens"], packed[n - 1]["tokens"])
    rows = packed.__getitems__([0, -1])
    assert np.array_equal(rows[0]["tokens"], first["tokens"]) and np.array_equal(
        rows[1]["labels"], last["labels"]
    )
    for bad in (n, -n - 1):
        with pytest.raises(IndexError, match=f"packed window {bad} out of range: .* packs into {n} windows"):
            packed[bad]


def test_record_starts_and_base_indexes_follow_records_of(packed: PackedView) -> None:
    windows = list(range(len(packed)))
    positions, counts = packed.record_starts_batch(windows)
    expected = []
    for w in windows:
        lens = [m for _, m in packed.records_of(w)]
        assert counts[w] == len(lens)
        expected += np.cumsum([0, *lens[:-1]]).tolist()
        # each record starts where position_ids restart at 0
        pos = packed[w]["position_ids"].tolist()
        assert [p for p in np.cumsum([0, *lens[:-1]]).tolist() if pos[p] == 0] == np.cumsum(
            [0, *lens[:-1]]
        ).tolist()
    assert positions.tolist() == expected
    base = packed.base_indexes(windows)
    inner = len(packed.view)
    assert base.tolist() == [min(packed.records_of(w)[0][0] // LENGTH, inner - 1) for w in windows]


def test_pieces_name_the_shard_bytes_of_each_window(packed: PackedView) -> None:
    tokens = np.asarray(packed.view.manifest.shard_table.tokens, dtype=np.int64)
    shard_start = np.concatenate(([0], np.cumsum(tokens)[:-1])).tolist()
    for w in range(len(packed)):
        row = packed[w]["tokens"].tolist()
        pieces = packed.pieces(w)
        assert sum(stop - start for _, start, stop, _ in pieces) == sum(m for _, m in packed.records_of(w))
        for shard, start, stop, offset in pieces:
            first = shard_start[shard] + start + 1  # the token id at that stream position
            assert row[offset : offset + stop - start] == list(range(first, first + stop - start))


def test_empty_records_are_counted_and_left_out(tmp_path: Path) -> None:
    storage = _write(tmp_path / "e", [3, 0, 4, 0, 0, 5])
    packed = pack_view(open_view(storage, LENGTH), "whole", seed=0, shuffle=False)
    assert packed.stats.empty == 3 and packed.stats.records == 6 and packed.stats.tokens == 12
    assert sorted(m for w in range(len(packed)) for _, m in packed.records_of(w)) == [3, 4, 5]


def test_bad_settings_are_named(tmp_path: Path) -> None:
    for pad in (-1, True, 1.5):
        with pytest.raises(
            ValueError, match=f"Packing\\(pad_id={pad!r}\\): give a token id \\(an int >= 0\\)"
        ):
            Packing(pad_id=pad)  # type: ignore[arg-type]
    ids = _write(tmp_path / "ids", [3, 4, 5], StreamNumpyFormat({"ids": np.uint32}))
    with pytest.raises(ValueError, match="pack= needs a 'tokens' field to pad; this stream has \\['ids'\\]"):
        pack_view(open_view(ids, LENGTH), "whole", seed=0, shuffle=False)
    with pytest.raises(ValueError, match="pack=3: give pack='whole'"):
        pack_view(open_view(ids, LENGTH), 3, seed=0, shuffle=False)
