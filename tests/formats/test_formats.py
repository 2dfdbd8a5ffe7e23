"""Formats turn records into bytes and refuse what they cannot store unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import (
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    StreamNumpyFormat,
)
from guideloom.errors import RecordError, SpanError
from guideloom.formats import check_spans, same_spec


@pytest.mark.parametrize(
    "fmt, record",
    [
        (DocumentPickleFormat(), {"text": "hi", "ids": np.arange(3)}),
        (DocumentJsonFormat(), {"text": "héllo", "ids": [1, 2, 3], "n": None}),
        (DocumentMsgpackFormat(), {"text": "hi", "blob": b"\x00\x01", "ids": [1, 2]}),
    ],
)
def test_document_round_trip(fmt, record):
    back = fmt.decode(memoryview(fmt.encode(record)))
    assert back.keys() == record.keys()
    for key, value in record.items():
        np.testing.assert_array_equal(np.asarray(back[key]), np.asarray(value))


def test_json_refuses_arrays_with_a_fix():
    with pytest.raises(TypeError, match="tolist"):
        DocumentJsonFormat().encode({"ids": np.arange(3)})


def test_stream_format_structured_dtype_is_packed_little_endian():
    fmt = StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})
    assert fmt.itemsize == 5
    assert fmt.dtype.names == ("tokens", "loss_mask")
    assert fmt.dtype["tokens"].str == "<u4"
    elements = fmt.to_elements({"tokens": [1, 2], "loss_mask": [1, 0]})
    assert elements.tobytes() == b"\x01\x00\x00\x00\x01\x02\x00\x00\x00\x00"


def test_stream_format_casts_safely_and_by_value():
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    out = fmt.to_elements({"tokens": np.array([0, 65_535], dtype=np.int64)})
    assert out["tokens"].tolist() == [0, 65_535]
    with pytest.raises(RecordError, match=r"value 70000 does not fit uint16"):
        fmt.to_elements({"tokens": np.array([1, 70_000])})
    with pytest.raises(RecordError, match="value -1 does not fit uint16"):
        fmt.to_elements({"tokens": [-1, 3]})
    assert fmt.to_elements({"tokens": np.ones(2)})["tokens"].tolist() == [1, 1]
    with pytest.raises(RecordError, match="value 1.5 is not a whole number"):
        fmt.to_elements({"tokens": np.array([1.0, 1.5])})
    with pytest.raises(RecordError, match="value 1000000 does not fit uint16"):
        fmt.to_elements({"tokens": np.array([1e6])})
    with pytest.raises(RecordError, match="complex128 values as uint16"):
        fmt.to_elements({"tokens": np.array([1j])})


@pytest.mark.parametrize(
    "record, message",
    [
        ({"tokens": [1, 2], "loss_mask": [1]}, "different lengths"),
        ({"tokens": [1, 2]}, r"missing field\(s\) \['loss_mask'\]"),
        ({"tokens": [1], "loss_mask": [1], "doc": [0]}, r"unknown field\(s\) \['doc'\]"),
        ({"tokens": [[1, 2]], "loss_mask": [[1, 1]]}, "are 1-D"),
        ([1, 2, 3], "is a dict of 1-D arrays"),
    ],
)
def test_stream_format_bad_records(record, message):
    fmt = StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})
    with pytest.raises(RecordError, match=message):
        fmt.to_elements(record, where="part 0 record 7")
    with pytest.raises(RecordError, match="part 0 record 7"):
        fmt.to_elements(record, where="part 0 record 7")


def test_stream_format_spec_distinguishes_fields_and_dtypes():
    a = StreamNumpyFormat({"tokens": np.uint32})
    assert same_spec(a.spec(), StreamNumpyFormat({"tokens": "uint32"}).spec())
    assert not same_spec(a.spec(), StreamNumpyFormat({"tokens": np.uint16}).spec())
    assert not same_spec(a.spec(), StreamNumpyFormat({"ids": np.uint32}).spec())
    assert StreamNumpyFormat.from_config(a.config()) == a


@pytest.mark.parametrize("bad", [{}, {"t": "U5"}, {"t": np.dtype((np.uint8, 3))}, {"t": object}])
def test_stream_format_rejects_unsupported_fields(bad):
    with pytest.raises(TypeError):
        StreamNumpyFormat(bad)


def test_check_spans():
    assert check_spans([(0, 2, "a"), (2, 5, "b")], 5, "r") == [(0, 2, "a"), (2, 5, "b")]
    with pytest.raises(SpanError, match="overlaps"):
        check_spans([(0, 3, "a"), (2, 5, "b")], 5, "r")
    with pytest.raises(SpanError, match="overlaps or comes before"):
        check_spans([(3, 5, "a"), (0, 2, "b")], 5, "r")
    with pytest.raises(SpanError, match=r"<= 5"):
        check_spans([(3, 6, "a")], 5, "r")
    with pytest.raises(SpanError, match="non-empty"):
        check_spans([(2, 2, "a")], 5, "r")
    with pytest.raises(SpanError, match="triple"):
        check_spans([(1, 2)], 5, "r")
