"""Decoding a run of consecutive documents at once (`DocumentStorageFormat.decode_run`).

The readers hand a format the bytes of several documents stored one after another; MessagePack
decodes them in one streaming pass. These tests hold it to the record-by-record result: the same
records, the same error for damaged bytes, and a subclass's own ``decode`` always honoured.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from guideloom import DocumentDataset, DocumentJsonFormat, DocumentMsgpackFormat, DocumentStorage


def _run(fmt: Any, records: list[Any], at: int = 1000) -> tuple[bytes, list[int]]:
    blobs = [fmt.encode(r) for r in records]
    bounds = [at]
    for b in blobs:
        bounds.append(bounds[-1] + len(b))
    return b"".join(blobs), bounds


def _records(n: int, seed: int, binary: bool = True) -> list[Any]:
    rng = random.Random(seed)
    raw = b"\x00\xff" if binary else "ab"
    kinds = [
        lambda i: {"id": i, "text": "x" * rng.randrange(0, 300)},
        lambda i: {"tokens": [rng.randrange(1 << 17) for _ in range(rng.randrange(0, 50))], "b": raw},
        lambda i: [i, None, True, 1.5, {"nested": ["a", {"b": -i}]}],
        lambda i: "",
        lambda i: i,
    ]
    return [rng.choice(kinds)(i) for i in range(n)]


@pytest.mark.parametrize("fmt", [DocumentMsgpackFormat(), DocumentJsonFormat()], ids=["msgpack", "json"])
def test_a_run_decodes_to_each_record_decoded_alone(fmt: Any) -> None:
    for seed, n in ((0, 2), (1, 7), (2, 300)):
        records = _records(n, seed, binary=isinstance(fmt, DocumentMsgpackFormat))
        data, bounds = _run(fmt, records)
        alone = [fmt.decode(fmt.encode(r)) for r in records]
        assert fmt.decode_run(data, bounds) == alone == records
        assert fmt.decode_run(memoryview(data), bounds) == alone


def test_a_run_longer_than_the_decoders_buffer_is_decoded_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run is fed in pieces (records cut at a piece's end, one record larger than the
    buffer) and still decoded by the streaming pass alone: record-by-record decoding would raise."""
    from guideloom.formats import document

    fmt = DocumentMsgpackFormat()
    rng = random.Random(5)
    records: list[Any] = [{"id": i, "text": "y" * rng.randrange(0, 9000)} for i in range(120)]
    records.insert(60, {"id": -1, "text": "z" * (3 * document._RUN_BUFFER)})
    data, bounds = _run(fmt, records)
    assert len(data) > 8 * document._RUN_BUFFER

    def record_by_record(self: Any, data: Any) -> Any:
        raise AssertionError("the run fell back to decoding record by record")

    monkeypatch.setattr(DocumentMsgpackFormat, "decode", record_by_record)
    assert fmt.decode_run(data, bounds) == records
    assert fmt.decode_run(memoryview(data)[: bounds[-1] - bounds[0]], bounds) == records


def test_damaged_bytes_give_the_error_decode_gives() -> None:
    fmt = DocumentMsgpackFormat()
    records = _records(20, 3)
    data, bounds = _run(fmt, records)
    # one record's bytes cut short and padded: the stream no longer ends on the run's end
    k = 5
    a, b = bounds[k] - bounds[0], bounds[k + 1] - bounds[0]
    damaged = data[:a] + b"\xc1" * (b - a) + data[b:]  # 0xc1 is never used by MessagePack
    with pytest.raises(ValueError) as alone:
        fmt.decode(damaged[a:b])
    with pytest.raises(type(alone.value)):
        fmt.decode_run(damaged, bounds)
    # a record with one value too many (two values in one record's bytes): ExtraData, as alone
    extra = msgpack.packb(1) + msgpack.packb(2)
    twice = data[:a] + extra + data[b:]
    shifted = bounds[: k + 1] + [x - (b - a) + len(extra) for x in bounds[k + 1 :]]
    with pytest.raises(msgpack.ExtraData):
        fmt.decode_run(twice, shifted)
    # a header that claims more items than the bytes hold: refused as decode refuses it alone,
    # without making room for them first
    k = max(range(len(records)), key=lambda i: bounds[i + 1] - bounds[i])  # room for the header
    a, b = bounds[k] - bounds[0], bounds[k + 1] - bounds[0]
    huge = b"\xdd\xff\xff\xff\xff" + bytes(b - a - 5)
    with pytest.raises(ValueError) as alone:
        fmt.decode(huge)
    claimed = data[:a] + huge + data[b:]
    with pytest.raises(ValueError) as run:
        fmt.decode_run(claimed, bounds)
    assert str(run.value) == str(alone.value)


def test_a_subclass_decode_is_used_for_runs(tmp_path: Any) -> None:
    class Tagged(DocumentMsgpackFormat):
        def decode(self, data: bytes | memoryview) -> Any:
            return {"decoded": super().decode(data)}

    fmt = Tagged()
    records = _records(10, 4)
    data, bounds = _run(fmt, records)
    assert fmt.decode_run(data, bounds) == [{"decoded": r} for r in records]

    # and through a dataset read in order (runs of several documents in one read)
    storage = DocumentStorage(str(tmp_path / "tagged"), fmt)
    with storage.writer() as w:
        for r in records:
            w.append(r)
    view = DocumentDataset(DocumentStorage(str(tmp_path / "tagged"), fmt))
    assert view.__getitems__(list(range(10))) == [{"decoded": r} for r in records]


def test_documents_read_in_order_equal_the_records_written(tmp_path: Any) -> None:
    records = _records(500, 5)
    storage = DocumentStorage(str(tmp_path / "docs"), DocumentMsgpackFormat())
    with storage.writer(shard_size=4096) as w:
        for r in records:
            w.append(r)
    view = DocumentDataset(DocumentStorage(str(tmp_path / "docs"), DocumentMsgpackFormat()))
    assert view.__getitems__(list(range(500))) == records  # long runs, several shards
    picks = [3, 4, 5, 9, 10, 200, 201, 202, 203, 499]
    assert view.__getitems__(picks) == [records[i] for i in picks]  # short runs, in and out of order
