"""SchemaMismatchError names the field that differs and suggests code that runs: the suggested
class and format expression are evaluated here and open the dataset."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import guideloom
from guideloom import DocumentMsgpackFormat, DocumentStorage, StreamNumpyFormat, StreamStorage
from guideloom.errors import SchemaMismatchError


def _run_suggestion(expr: str, url: str) -> Any:
    return eval(expr, {"np": np, "url": url, **vars(guideloom)})  # the message's code, as written


def test_a_dtype_mismatch_names_the_field_and_the_format_that_opens_it(tmp_path: Any) -> None:
    url = str(tmp_path / "s")
    fmt = StreamNumpyFormat({"tokens": np.uint16, "doc_index": np.uint32})
    with StreamStorage(url, fmt).writer() as w:
        w.append({"tokens": np.arange(8, dtype=np.uint16), "doc_index": np.zeros(8, np.uint32)})
    wrong = StreamNumpyFormat({"tokens": np.uint32, "doc_index": np.uint32})
    with pytest.raises(SchemaMismatchError) as caught:
        _ = StreamStorage(url, wrong).manifest
    text = str(caught.value)
    assert "(field 'tokens': written <u2, opened <u4)" in text and "'doc_index': written" not in text
    expr = text.split("reopen it with the format it was written with: ")[1]
    storage = StreamStorage(url, _run_suggestion(expr, url))
    assert storage.manifest.total_tokens == 8


@pytest.mark.parametrize("opened_as", ["stream", "documents"])
def test_a_class_mismatch_suggests_a_constructor_that_runs(tmp_path: Any, opened_as: str) -> None:
    url = str(tmp_path / "d")
    if opened_as == "stream":  # written as documents (msgpack takes no arguments)
        with DocumentStorage(url, DocumentMsgpackFormat()).writer() as w:
            w.append({"tokens": [1, 2]})
        opener: Any = lambda: StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).manifest  # noqa: E731
    else:
        with StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).writer() as w:
            w.append({"tokens": np.arange(4, dtype=np.uint16)})
        opener = lambda: DocumentStorage(url, DocumentMsgpackFormat()).manifest  # noqa: E731
    with pytest.raises(SchemaMismatchError) as caught:
        opener()
    match = re.search(r"reopen it with the class and format it records: (.+)$", str(caught.value))
    assert match is not None
    storage = _run_suggestion(match.group(1), url)
    assert storage.manifest.total_records >= 1
