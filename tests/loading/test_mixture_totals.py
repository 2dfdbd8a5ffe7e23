"""``Mixture(weight_by="tokens")`` and ``guideloom inspect`` on document datasets grown by appends
whose ingestion metadata (version 2, before ``guideloom ingest`` counted the whole dataset)
describes the last append only: the counts are added up along the snapshot log on open."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from guideloom import DocumentStorage
from guideloom.cli import app
from guideloom.formats import DocumentJsonFormat
from guideloom.loading.mixture import Mixture


def _write(storage: DocumentStorage, n: int, length: int, plan: str, **kw: Any) -> None:
    meta = {"ingest": {"version": 2, "plan": plan, "documents": n, "tokens": n * length}}
    with storage.writer(metadata=meta, **kw) as writer:
        for i in range(n):
            writer.append({"i": i, "tokens": list(range(length))})


def test_version_2_appends_are_added_up_along_the_log(tmp_path: Any) -> None:
    grown = DocumentStorage(str(tmp_path / "grown"), DocumentJsonFormat())
    _write(grown, 40, 10, "a")  # 400 tokens
    _write(grown, 20, 40, "b", append=True)  # 800 tokens: the metadata now says 20 docs, 800 tokens
    _write(grown, 10, 4, "c", append=True)  # 40 tokens
    plain = DocumentStorage(str(tmp_path / "plain"), DocumentJsonFormat())
    _write(plain, 10, 7, "p")
    mix = Mixture([(grown, 1), (plain, 1)], weight_by="tokens")
    assert mix.mean_tokens == (1240 / 70, 7.0)  # before: 40 / 70 for the grown dataset
    rollback = grown.snapshots()[1].id
    grown.rollback(rollback)  # back to 60 documents, 1200 tokens
    again = Mixture([(DocumentStorage(grown.url, DocumentJsonFormat()), 1), (plain, 1)], weight_by="tokens")
    assert again.mean_tokens[0] == 1200 / 60
    pinned = DocumentStorage(grown.url, DocumentJsonFormat(), snapshot=1)
    assert Mixture([(pinned, 1), (plain, 1)], weight_by="tokens").mean_tokens[0] == 10.0

    mixed = CliRunner().invoke(app, ["mix", f"{grown.url}=1", f"{plain.url}=1", "--weight-by", "tokens"])
    assert mixed.exit_code == 0, mixed.output
    shown = CliRunner().invoke(app, ["inspect", grown.url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["documents"] == 60


def test_boundaries_on_a_stream_with_metadata_say_what_it_is(tmp_path: Any) -> None:
    """The refusal no longer claims that a stream with metadata is read whole, with no windows."""
    import numpy as np
    import pytest

    from guideloom import StreamNumpyFormat, StreamWithMetaJsonFormat, StreamWithMetaStorage
    from guideloom.loading import StatefulDataLoader

    fmt = StreamWithMetaJsonFormat(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(str(tmp_path / "meta"), fmt)
    with storage.writer() as writer:
        for i in range(4):
            writer.append({"tokens": np.arange(10) + i}, spans=[(0, 10, {"doc": i})])
    with pytest.raises(ValueError) as info:
        StatefulDataLoader.from_storage(storage, sequence_length=8, batch_size=2, boundaries="records")
    message = str(info.value)
    assert "read whole" not in message and "not supported on streams with metadata" in message
    assert "--layout stream" in message
    assert len(list(StatefulDataLoader.from_storage(storage, sequence_length=8, batch_size=2))) == 3
